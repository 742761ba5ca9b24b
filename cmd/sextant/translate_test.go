package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestTranslateBookinfoSidecar(t *testing.T) {
	cmd := translateCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"-f", "../../examples/bookinfo", "--proxy", "sidecar~10.1.0.30~reviews-v1-0002.bookinfo~bookinfo.svc.cluster.local",
		"--meta", `{"LABELS":{"app":"reviews","version":"v1"}}`})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var got map[string][]map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	names := func(typ, field string) string {
		var ns []string
		for _, r := range got[typ] {
			ns = append(ns, r[field].(string))
		}
		return strings.Join(ns, " ")
	}
	for _, want := range []string{"outbound|9080|v2|reviews.bookinfo.svc.cluster.local", "inbound|9080||", "outbound|443||httpbin.org"} {
		if !strings.Contains(names("cds", "name"), want) {
			t.Errorf("cds lacks %s: %s", want, names("cds", "name"))
		}
	}
	// istiod's layout: the capture listeners and one listener per outbound destination, not bound.
	if l := names("lds", "name"); !strings.Contains(l, "virtualOutbound") || !strings.Contains(l, "virtualInbound") ||
		!strings.Contains(l, "0.0.0.0_9080") {
		t.Errorf("lds = %s", l)
	}
	for _, l := range got["lds"] {
		switch l["name"] {
		case "virtualOutbound":
			if chains, _ := l["filterChains"].([]any); len(chains) != 2 {
				t.Errorf("virtualOutbound has %d chains, want its own port's blackhole and the passthrough", len(chains))
			}
		case "0.0.0.0_9080":
			if l["bindToPort"] != false {
				t.Errorf("0.0.0.0_9080 bindToPort = %v", l["bindToPort"])
			}
		}
	}
	if r := names("rds", "name"); !strings.Contains(r, "9080") {
		t.Errorf("rds = %s", r)
	}
	if e := names("eds", "clusterName"); !strings.Contains(e, "outbound|9080|v1|reviews.bookinfo.svc.cluster.local") {
		t.Errorf("eds = %s", e)
	}
	// The example's Sidecar limits egress to bookinfo, istio-system and shop: payments in shop is visible.
	if !strings.Contains(names("cds", "name"), "payments.shop.internal") {
		t.Errorf("Sidecar egress scope lost shop services")
	}

	bad := translateCommand()
	bad.SetOut(&out)
	bad.SetErr(&errOut)
	bad.SetArgs([]string{"-f", "../../examples/bookinfo", "--proxy", "nonsense"})
	if err := bad.Execute(); err == nil || !strings.Contains(err.Error(), "want POD.NAMESPACE or a node id") {
		t.Errorf("neither POD.NAMESPACE nor a node id: %v", err)
	}
	bad.SetArgs([]string{"-f", "../../examples/bookinfo", "--proxy", "sidecar~10.1.0.30~reviews-v1-0002.bookinfo"})
	if err := bad.Execute(); err == nil || !strings.Contains(err.Error(), "want 4") {
		t.Errorf("malformed node id: %v", err)
	}
}
