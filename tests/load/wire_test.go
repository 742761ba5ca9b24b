package main

import (
	"bytes"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A response read off the wire carries the names, payloads, removals, type and nonce the generated message
// would, whatever other fields it has.
func TestParseDeltaResponse(t *testing.T) {
	payload := func(s string) *anypb.Any {
		a, err := anypb.New(wrapperspb.String(s))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	resp := &discovery.DeltaDiscoveryResponse{
		SystemVersionInfo: "v7",
		TypeUrl:           cdsType,
		Nonce:             "n42",
		Resources: []*discovery.Resource{
			{Name: "a", Version: "1", Resource: payload("first"), Ttl: durationpb.New(5), Aliases: []string{"x"}},
			{Name: "b", Version: "2", Resource: payload("second")},
		},
		RemovedResources: []string{"c", "d"},
		ControlPlane:     &core.ControlPlane{Identifier: "sextant"},
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseDeltaResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.size != proto.Size(resp) || got.TypeUrl != cdsType || got.Nonce != "n42" ||
		!slices.Equal(got.RemovedResources, []string{"c", "d"}) || len(got.Resources) != 2 {
		t.Fatalf("parsed %+v", got)
	}
	for i, r := range resp.Resources {
		if got.Resources[i].Name != r.Name || string(got.Resources[i].Version) != r.Version ||
			!bytes.Equal(got.Resources[i].Value, r.Resource.Value) {
			t.Errorf("resource %d: %q %x, want %q %x", i, got.Resources[i].Name, got.Resources[i].Value, r.Name, r.Resource.Value)
		}
	}
	if _, err := parseDeltaResponse(b[:len(b)-3]); err == nil {
		t.Error("a truncated frame parsed without error")
	}
}
