package conformance

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"
	"istio.io/istio/pilot/pkg/autoregistration"
	"istio.io/istio/pilot/pkg/config/memory"
	imodel "istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pkg/config/schema/collections"
	"istio.io/istio/pkg/config/schema/gvk"
	"istio.io/istio/pkg/spiffe"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/autoregister"
	sconfig "github.com/sextantmesh/sextant/pilot/config"
	smodel "github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pilot/xds"
)

// groupsYAML are the WorkloadGroups the agents below name: one with every field the entry is made of, one
// with a name long enough that the entry's name must be cut.
var groupsYAML = `apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: reviews-vm, namespace: bookinfo}
spec:
  metadata:
    labels: {app: reviews, version: vm}
    annotations: {team: books}
  template:
    serviceAccount: reviews
    ports: {http: 9081, grpc: 9090}
    labels: {tier: backend, version: template}
    weight: 3
    network: template-net
    locality: template/region
---
apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: ` + strings.Repeat("g", 245) + `, namespace: bookinfo}
spec:
  template: {serviceAccount: reviews}
`

// agentNode is the node a VM's agent sends: AUTO_REGISTER_GROUP and the rest of its metadata as Istio's
// agent encodes it.
type agentNode struct {
	name     string
	group    string
	ip       string
	metadata map[string]any
	locality *core.Locality
	identity string // the verified service account; "" for a stream without one
}

func (a agentNode) node() *core.Node {
	fields := map[string]any{"NAMESPACE": "bookinfo", "AUTO_REGISTER_GROUP": a.group}
	maps.Copy(fields, a.metadata)
	md, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	return &core.Node{Id: "sidecar~" + a.ip + "~vm1.bookinfo~bookinfo.svc.cluster.local", Metadata: md, Locality: a.locality}
}

var agentNodes = []agentNode{
	{name: "plain", group: "reviews-vm", ip: "10.0.0.7", identity: "reviews"},
	{name: "node labels over the group's, locality", group: "reviews-vm", ip: "10.0.0.8", identity: "reviews",
		metadata: map[string]any{"LABELS": map[string]any{"version": "node", "host": "vm1", "istio-locality": "eu.eu-1"}},
		locality: &core.Locality{Region: "eu", Zone: "eu-1", SubZone: "rack-4"}},
	{name: "region only", group: "reviews-vm", ip: "10.0.0.9", identity: "reviews", locality: &core.Locality{Region: "eu"}},
	{name: "network", group: "reviews-vm", ip: "10.0.0.10", identity: "reviews", metadata: map[string]any{"NETWORK": "vm-net"}},
	{name: "ipv6 addresses", group: "reviews-vm", ip: "fd00::7", identity: "reviews",
		metadata: map[string]any{"INSTANCE_IPS": "fd00::7,10.0.0.11"}},
	{name: "readiness probe", group: "reviews-vm", ip: "10.0.0.12", identity: "reviews",
		metadata: map[string]any{"PROXY_CONFIG": map[string]any{"readinessProbe": map[string]any{
			"httpGet": map[string]any{"path": "/ready", "port": 9081}}}}},
	{name: "long group name", group: strings.Repeat("g", 245), ip: "10.0.0.13", identity: "reviews"},
	{name: "another service account", group: "reviews-vm", ip: "10.0.0.14", identity: "ratings"},
	{name: "no such group", group: "missing", ip: "10.0.0.15", identity: "reviews"},
}

// A VM's agent naming a WorkloadGroup gets from Sextant the WorkloadEntry istiod's own auto-registration
// controller makes for the same group and node: name, labels, annotations and spec; a connection istiod
// refuses is refused.
func TestAutoRegisteredEntryAsIstiod(t *testing.T) {
	connectedAt := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, a := range agentNodes {
		t.Run(a.name, func(t *testing.T) {
			want, wantErr := istiodEntry(t, a, connectedAt)
			got, gotErr := sextantEntry(t, a, connectedAt)
			if (wantErr != nil) != (gotErr != nil) {
				t.Fatalf("istiod: entry %v, error %v\nsextant: entry %v, error %v", want, wantErr, got, gotErr)
			}
			if wantErr != nil {
				return
			}
			if d := entryDifference(want, got); d != "" {
				t.Error(d)
			}
		})
	}
}

// registeredEntry is what is compared of an entry.
type registeredEntry struct {
	name, namespace     string
	labels, annotations map[string]string
	spec                *networking.WorkloadEntry
}

func entryDifference(want, got *registeredEntry) string {
	var diffs []string
	if want.name != got.name || want.namespace != got.namespace {
		diffs = append(diffs, fmt.Sprintf("name: istiod %s/%s, sextant %s/%s", want.namespace, want.name, got.namespace, got.name))
	}
	if !maps.Equal(want.labels, got.labels) {
		diffs = append(diffs, fmt.Sprintf("labels: istiod %v, sextant %v", want.labels, got.labels))
	}
	if !maps.Equal(want.annotations, got.annotations) {
		diffs = append(diffs, fmt.Sprintf("annotations: istiod %v, sextant %v", want.annotations, got.annotations))
	}
	if !proto.Equal(want.spec, got.spec) {
		diffs = append(diffs, fmt.Sprintf("spec: istiod %v, sextant %v", want.spec, got.spec))
	}
	return strings.Join(diffs, "\n")
}

// istiodEntry connects a to istiod's controller over its in-memory config store, the proxy parsed from the
// node by istiod's own parser, and returns the entry it wrote.
func istiodEntry(t *testing.T, a agentNode, at time.Time) (*registeredEntry, error) {
	t.Helper()
	st := memory.NewController(memory.Make(collections.All))
	groups, err := parseIstioConfig(groupsYAML)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if _, err := st.Create(g); err != nil {
			t.Fatal(err)
		}
	}
	c := autoregistration.NewController(st, "replica-0", 0)
	node := a.node()
	meta, err := imodel.ParseMetadata(node.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := imodel.ParseServiceNodeWithMetadata(node.Id, meta)
	if err != nil {
		t.Fatal(err)
	}
	proxy.XdsNode = node
	proxy.VerifiedIdentity = &spiffe.Identity{TrustDomain: "cluster.local", Namespace: "bookinfo", ServiceAccount: a.identity}
	if err := c.OnConnect(istiodConn{proxy: proxy, at: at}); err != nil {
		return nil, err
	}
	entries := st.List(gvk.WorkloadEntry, "bookinfo")
	if len(entries) != 1 {
		return nil, fmt.Errorf("istiod wrote %d entries", len(entries))
	}
	e := entries[0]
	return &registeredEntry{name: e.Name, namespace: e.Namespace, labels: e.Labels, annotations: e.Annotations,
		spec: e.Spec.(*networking.WorkloadEntry)}, nil
}

// istiodConn is the connection istiod's controller is told of.
type istiodConn struct {
	proxy *imodel.Proxy
	at    time.Time
}

func (c istiodConn) ID() string             { return "conn-1" }
func (c istiodConn) Proxy() *imodel.Proxy   { return c.proxy }
func (c istiodConn) ConnectedAt() time.Time { return c.at }
func (c istiodConn) Stop()                  {}

// sextantEntry connects a to Sextant's controller and returns the entry it wrote.
func sextantEntry(t *testing.T, a agentNode, at time.Time) (*registeredEntry, error) {
	t.Helper()
	st := store.New()
	for i, doc := range strings.Split(groupsYAML, "\n---\n") {
		c, err := sconfig.Parse([]byte(doc), "groups.yaml", i, "default")
		if err != nil {
			t.Fatal(err)
		}
		st.Upsert(store.LayerFile, c)
	}
	c := autoregister.New(autoregister.Options{Store: st, Entries: autoregister.NewStoreEntries(st), Instance: "replica-0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	proxy, err := smodel.ParseProxy(a.node())
	if err != nil {
		t.Fatal(err)
	}
	proxy.Identity = &authn.Identity{TrustDomain: "cluster.local", Namespace: "bookinfo", ServiceAccount: a.identity}
	if err := c.Connected(xds.ConnectionEvent{ID: "conn-1", Proxy: proxy, ConnectedAt: at}); err != nil {
		return nil, err
	}
	entries := st.List(sconfig.WorkloadEntry)
	if len(entries) != 1 {
		return nil, fmt.Errorf("sextant wrote %d entries", len(entries))
	}
	e := entries[0]
	return &registeredEntry{name: e.Name, namespace: e.Namespace, labels: e.Labels, annotations: e.Annotations,
		spec: e.Spec.(*networking.WorkloadEntry)}, nil
}
