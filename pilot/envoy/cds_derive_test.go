package envoy

import (
	"slices"
	"testing"
)

// TestCDSFollowsADeclaredInput: one more input in the outbound clusters' declaration, and nothing else,
// makes their cache key change with it and their derivation rebuild on it; without it, the same change is
// neither in the key nor a reason to rebuild.
func TestCDSFollowsADeclaredInput(t *testing.T) {
	_, push, g, proxies := derivationFixture(t)
	p := proxies[0]
	in := clusterInputs{scope: g.scopeFor(p, push), push: push, flavor: flavorOf(p), gen: clusterGenerator{g}}
	extra := new(int)
	plan := *outboundClusterPlan
	plan.Inputs = outboundClusterInputs.With(clusterInput{Name: "extra", Of: func(clusterInputs) any { return extra }})

	first, err := plan.Next(nil, in)
	if err != nil || len(first.Items) == 0 {
		t.Fatalf("first build: %v, %d clusters", err, len(first.Items))
	}
	declared, err := outboundClusterPlan.Next(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	before, declaredBefore := plan.Inputs.Key(in), outboundClusterInputs.Key(in)
	extra = new(int) // the extra input changes; nothing the real declaration reads does

	if got := plan.Inputs.Changed(before, plan.Inputs.Key(in)); !slices.Equal(got, []string{"extra"}) {
		t.Errorf("the key with the extra input changed on %v, want [extra]", got)
	}
	if outboundClusterInputs.Key(in) != declaredBefore {
		t.Error("the real declaration's key changed though none of its inputs did")
	}
	next, err := plan.Next(first, in)
	if err != nil || next.Full != "extra changed" {
		t.Errorf("the derivation did not rebuild on the extra input: full %q, %v", next.Full, err)
	}
	same, err := outboundClusterPlan.Next(declared, in)
	if err != nil || same.Full != "" || !slices.Equal(same.Items, declared.Items) {
		t.Errorf("the real plan rebuilt on an input it does not declare: full %q, %v", same.Full, err)
	}
}
