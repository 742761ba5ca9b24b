package config

import (
	"fmt"
	"regexp"
	"strings"

	security "istio.io/api/security/v1beta1"
)

// conditionKeys are the `when` keys istiod's validation accepts as written (pkg/config/security), with the
// check of their values; nil checks only that no value is empty.
var conditionKeys = map[string]func(f string, values []string) error{
	"source.ip":              checkIPs,
	"remote.ip":              checkIPs,
	"destination.ip":         checkIPs,
	"source.namespace":       nil,
	"source.principal":       nil,
	"source.serviceAccount":  checkServiceAccounts,
	"source.trustDomain":     checkWildcards,
	"request.auth.principal": nil,
	"request.auth.audiences": nil,
	"request.auth.presenter": nil,
	"destination.port":       checkPorts,
	"connection.sni":         nil,
}

// conditionMapKeys are the key prefixes istiod accepts followed by a bracketed name, e.g.
// request.headers[User-Agent], request.auth.claims[groups] or request.auth.claims[a][b].
var conditionMapKeys = []struct{ prefix, form string }{
	{"request.headers", "request.headers[NAME]"},
	{"request.auth.claims", "request.auth.claims[NAME]"},
	{"experimental.envoy.filters.", "experimental.envoy.filters.FILTER[KEY]"},
}

// conditionRetired are keys of older policy versions istiod refuses, with what replaced them.
var conditionRetired = map[string]string{
	"destination.namespace": "replaced by the policy's own namespace (metadata.namespace)",
	"destination.name":      "deprecated: only supported in v1alpha1",
	"destination.user":      "deprecated: only supported in v1alpha1",
}

func validateCondition(f string, w *security.Condition) error {
	if w == nil {
		return fieldErr(f, "null: a condition must not be null")
	}
	if w.Key == "" {
		return fieldErr(f+".key", "required")
	}
	if len(w.Values) == 0 && len(w.NotValues) == 0 {
		return fieldErr(f+".values", "values or notValues is required")
	}
	check, err := conditionKey(f+".key", w.Key)
	if err != nil {
		return err
	}
	if check == nil {
		check = checkEmptyValues
	}
	for _, l := range []namedValues{{"values", w.Values}, {"notValues", w.NotValues}} {
		if err := checkEmptyValues(f+"."+l.name, l.values); err != nil {
			return err
		}
		if err := check(f+"."+l.name, l.values); err != nil {
			return err
		}
	}
	return nil
}

// conditionKey checks a `when` key (field f) as istiod's ValidateAttribute does, and returns the check of
// its values. A key istiod refuses would be dropped, or make its rule match nothing, when translated.
func conditionKey(f, key string) (func(string, []string) error, error) {
	if check, ok := conditionKeys[key]; ok {
		return check, nil
	}
	for _, mk := range conditionMapKeys {
		if strings.HasPrefix(key, mk.prefix) {
			// istiod's validateMapKey: a name in brackets after the prefix, "[" not first, "[]" not last.
			open := strings.Index(key, "[")
			if !strings.HasSuffix(key, "]") || open <= 0 || open >= len(key)-2 {
				return nil, fieldErr(f, "%q is not of the form %s", key, mk.form)
			}
			return nil, nil
		}
	}
	if why, ok := conditionRetired[key]; ok {
		return nil, fieldErr(f, "%q: %s", key, why)
	}
	if strings.HasPrefix(key, "destination.labels") {
		return nil, fieldErr(f, "%q: replaced by the policy's workload selector", key)
	}
	return nil, fieldErr(f, "%q is not a known attribute", key)
}

// pathLiteral is a path segment Envoy's URI template takes beside {*} and {**}: RFC 3986 pchars.
var pathLiteral = regexp.MustCompile("^[a-zA-Z0-9-._~%!$&'()+,;:@=]+$")

// checkPathTemplates applies istiod's CheckValidPathTemplate: {*} and {**} stand for whole segments, {**}
// last, no other braces, and in a path with a template every other segment a literal.
func checkPathTemplates(f string, paths []string) error {
	for i, p := range paths {
		vf := fmt.Sprintf("%s[%d]", f, i)
		if p == "" {
			return fieldErr(vf, "empty value")
		}
		template := strings.Contains(p, "{*}") || strings.Contains(p, "{**}")
		anySeen := false
		for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
			switch {
			case seg == "{*}" && !anySeen:
				continue
			case seg == "{**}" && !anySeen:
				anySeen = true
				continue
			case seg == "{*}" || seg == "{**}":
				return fieldErr(vf, "%q: {**} must be the last operator", p)
			case strings.ContainsAny(seg, "{}"):
				return fieldErr(vf, "%q: { or } outside a path template ({*} or {**})", p)
			case template && !pathLiteral.MatchString(seg):
				return fieldErr(vf, "%q: segment %q is not a valid path literal", p, seg)
			}
		}
	}
	return nil
}
