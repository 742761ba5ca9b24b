package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
)

const regexHead = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: web, namespace: shop}\nspec:\n" +
	"  hosts: [web]\n  http:\n"

// A regex Envoy's RE2 would not compile is refused, as istiod refuses it, naming the VirtualService and the
// field: left to generation, the route it guards would be left out and requests would reach the next one.
func TestRouteRegexErrors(t *testing.T) {
	for _, tc := range []struct{ route, field, message string }{
		{"  - match: [{uri: {regex: \"(?=admin).*\"}}]\n    fault: {abort: {httpStatus: 403, percentage: {value: 100}}}\n" +
			"    route: [{destination: {host: web}}]\n",
			"spec.http[0].match[0].uri.regex", "not an RE2 regex"},
		{"  - match: [{uri: {regex: \"/a{1001}\"}}]\n    directResponse: {status: 403}\n",
			"spec.http[0].match[0].uri.regex", "invalid repeat count"},
		{"  - match: [{uri: {regex: \"\"}}]\n    directResponse: {status: 403}\n", "spec.http[0].match[0].uri.regex", "empty"},
		{"  - match: [{uri: {regex: \"" + strings.Repeat("a", 1025) + "\"}}]\n    directResponse: {status: 403}\n",
			"spec.http[0].match[0].uri.regex", "at most 1024"},
		{"  - match: [{uri: {prefix: /}, headers: {x-user: {regex: \"(?!bob)\"}}}]\n    redirect: {uri: /login}\n",
			"spec.http[0].match[0].headers[x-user].regex", "not an RE2 regex"},
		// "*" asks for presence in withoutHeaders only, as istiod reads it; elsewhere it is a regex, and a bad one.
		{"  - match: [{headers: {x-user: {regex: \"*\"}}}]\n    redirect: {uri: /login}\n",
			"spec.http[0].match[0].headers[x-user].regex", "missing argument to repetition operator"},
		{"  - match: [{queryParams: {id: {regex: \"\\\\1\"}}}]\n    redirect: {uri: /login}\n",
			"spec.http[0].match[0].queryParams[id].regex", "not an RE2 regex"},
		{"  - match: [{withoutHeaders: {x-a: {regex: \"*\"}, x-b: {regex: \"(?<=a)b\"}}}]\n    redirect: {uri: /login}\n",
			"spec.http[0].match[0].withoutHeaders[x-b].regex", "not an RE2 regex"},
		{"  - match: [{method: {exact: GET}}, {authority: {regex: \"[a-\"}}]\n    redirect: {uri: /login}\n",
			"spec.http[0].match[1].authority.regex", "not an RE2 regex"},
		{"  - match: [{scheme: {regex: \"(?i\"}}]\n    redirect: {uri: /login}\n", "spec.http[0].match[0].scheme.regex", "not an RE2 regex"},
		{"  - match: [{method: {regex: \"G(?=ET)\"}}]\n    redirect: {uri: /login}\n", "spec.http[0].match[0].method.regex", "not an RE2 regex"},
		{"  - rewrite: {uriRegexRewrite: {match: \"^/(?=v1)(.*)\", rewrite: \"/\\\\1\"}}\n    route: [{destination: {host: web}}]\n",
			"spec.http[0].rewrite.uriRegexRewrite.match", "not an RE2 regex"},
		{"  - rewrite: {uriRegexRewrite: {match: \"^/v1(.*)\"}}\n    route: [{destination: {host: web}}]\n",
			"spec.http[0].rewrite.uriRegexRewrite.rewrite", "required"},
		{"  - rewrite: {uriRegexRewrite: {rewrite: \"/x\"}}\n    route: [{destination: {host: web}}]\n",
			"spec.http[0].rewrite.uriRegexRewrite.match", "empty"},
		{"  - rewrite: {uri: /v2, uriRegexRewrite: {match: \"^/v1(.*)\", rewrite: \"/\\\\1\"}}\n    route: [{destination: {host: web}}]\n",
			"spec.http[0].rewrite.uriRegexRewrite", "cannot be combined with uri"},
		{"  - rewrite: {}\n    route: [{destination: {host: web}}]\n", "spec.http[0].rewrite", "one of uri, uriRegexRewrite or authority"},
	} {
		_, err := parseOne(t, regexHead+tc.route)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(ce.Message, tc.message) || ce.Name != "web" {
			t.Errorf("route %.80q: error %v, want VirtualService web, field %s with %q", tc.route, err, tc.field, tc.message)
		}
	}
}

// A delegate (a VirtualService without hosts) is held to the same rules: its routes merge into its root's.
func TestDelegateRouteRegexError(t *testing.T) {
	doc := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: admin, namespace: shop}\nspec:\n  http:\n" +
		"  - match: [{uri: {regex: \"(?=admin).*\"}}]\n    directResponse: {status: 403}\n"
	_, err := parseOne(t, doc)
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Field != "spec.http[0].match[0].uri.regex" || ce.Name != "admin" {
		t.Errorf("error %v, want the delegate's uri regex", err)
	}
}

// What istiod accepts stays accepted: RE2 regexes in every field, withoutHeaders "*", rewrites of either kind.
func TestRouteRegexAccepted(t *testing.T) {
	c, err := parseOne(t, regexHead+`  - match:
    - uri: {regex: "/admin(/.*)?"}
      scheme: {regex: "https?"}
      method: {regex: "GET|HEAD"}
      authority: {regex: "web(\\.shop)?(:[0-9]+)?"}
      headers: {x-user: {regex: "[a-z]{1,1000}"}}
      queryParams: {id: {regex: "[0-9]+"}}
      withoutHeaders: {x-debug: {regex: "*"}, x-trace: {regex: "(?i)on"}}
    rewrite: {uriRegexRewrite: {match: "^/admin(/.*)?$", rewrite: "/internal\\1"}}
    route: [{destination: {host: web}}]
  - match: [{uri: {prefix: /}}]
    rewrite: {authority: other}
    route: [{destination: {host: web}}]
`)
	if err != nil {
		t.Fatal(err)
	}
	if ws := config.Warnings(c); len(ws) != 0 {
		t.Errorf("warnings: %v", warningFields(ws))
	}
}
