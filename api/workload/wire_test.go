package workload_test

// These tests pin the istio.workload wire format to ztunnel's schema. Every
// field number below is written out literally (taken from ztunnel's
// proto/workload.proto) rather than read from the generated code, so a
// renumbered or retyped field in workload.proto fails here.

import (
	"bytes"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextantmesh/sextant/api/workload"
)

// Hand encoders. Each takes the field number as a literal from the caller.

func str(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func raw(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// msg appends a length-delimited sub-message built from parts.
func msg(b []byte, num protowire.Number, parts ...[]byte) []byte {
	return raw(b, num, bytes.Join(parts, nil))
}

func varint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func packed(b []byte, num protowire.Number, vs ...uint64) []byte {
	var p []byte
	for _, v := range vs {
		p = protowire.AppendVarint(p, v)
	}
	return raw(b, num, p)
}

func ip(s string) []byte { return netip.MustParseAddr(s).AsSlice() }

// check decodes wire into a fresh got and requires it to equal want, unknown
// fields included, so a mis-numbered field cannot hide there. It then encodes
// want with the generated code and requires the same top-level field numbers
// and wire types as the hand-built bytes (order aside: the Go encoder writes
// oneof members last), which pins the encode direction too, e.g. packed
// repeated scalars.
func check(t *testing.T, wire []byte, got, want proto.Message) {
	t.Helper()
	if err := proto.Unmarshal(wire, got); err != nil {
		t.Fatalf("unmarshal %T: %v", got, err)
	}
	if u := got.ProtoReflect().GetUnknown(); len(u) != 0 {
		t.Errorf("%T: %d bytes decoded as unknown fields: %x", got, len(u), u)
	}
	if !proto.Equal(got, want) {
		t.Errorf("%T decoded wrong\n got: %v\nwant: %v", got, got, want)
	}
	enc, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
	if err != nil {
		t.Fatalf("marshal %T: %v", want, err)
	}
	if g, w := fieldKeys(t, enc), fieldKeys(t, wire); g != w {
		t.Errorf("%T encodes fields %s, hand-built wire has %s", want, g, w)
	}
}

// fieldKeys lists the top-level (number, wire type) pairs of b, sorted.
func fieldKeys(t *testing.T, b []byte) string {
	t.Helper()
	var keys []string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeField(b)
		if n < 0 {
			t.Fatalf("bad wire: %v", protowire.ParseError(n))
		}
		keys = append(keys, fmt.Sprintf("%03d/%d", num, typ))
		b = b[n:]
	}
	sort.Strings(keys)
	return strings.Join(keys, " ")
}

// allSet requires that every non-oneof field of m is populated, so a test
// covering m cannot silently skip a field added to the schema.
func allSet(t *testing.T, m proto.Message) {
	t.Helper()
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.ContainingOneof() != nil {
			continue
		}
		if !r.Has(fd) {
			t.Errorf("%s: field %s (%d) not covered", r.Descriptor().FullName(), fd.Name(), fd.Number())
		}
	}
}

// Wire fixtures for the small messages, reused inside bigger ones.

func networkAddressWire(network, addr string) []byte {
	var b []byte
	b = str(b, 1, network)  // NetworkAddress.network
	b = raw(b, 2, ip(addr)) // NetworkAddress.address
	return b
}

func portWire(svc, target uint64) []byte {
	var b []byte
	b = varint(b, 1, svc)    // Port.service_port
	b = varint(b, 2, target) // Port.target_port
	return b
}

func namespacedHostnameWire() []byte {
	var b []byte
	b = str(b, 1, "istio-system")                            // NamespacedHostname.namespace
	b = str(b, 2, "waypoint.istio-system.svc.cluster.local") // NamespacedHostname.hostname
	return b
}

func gatewayByAddressWire() []byte {
	var b []byte
	b = msg(b, 2, networkAddressWire("net-a", "10.0.0.9")) // GatewayAddress.address (oneof destination)
	b = varint(b, 3, 15008)                                // GatewayAddress.hbone_mtls_port
	return b
}

func gatewayByHostnameWire() []byte {
	var b []byte
	b = msg(b, 1, namespacedHostnameWire()) // GatewayAddress.hostname (oneof destination)
	b = varint(b, 3, 15009)                 // GatewayAddress.hbone_mtls_port
	return b
}

func loadBalancingWire() []byte {
	var b []byte
	b = packed(b, 1, 6, 1, 2, 3, 4, 5) // LoadBalancing.routing_preference: NETWORK REGION ZONE SUBZONE NODE CLUSTER
	b = varint(b, 2, 2)                // LoadBalancing.mode = FAILOVER
	b = varint(b, 3, 1)                // LoadBalancing.health_policy = ALLOW_ALL
	b = varint(b, 4, 1)                // LoadBalancing.dns_connect_strategy = FIRST_HEALTHY_RACE
	return b
}

func extensionWire() []byte {
	inner, _ := proto.Marshal(wrapperspb.String("x"))
	var anyB []byte
	anyB = str(anyB, 1, "type.googleapis.com/google.protobuf.StringValue") // Any.type_url
	anyB = raw(anyB, 2, inner)                                             // Any.value
	var b []byte
	b = str(b, 1, "sextant.io/ext") // Extension.name
	b = msg(b, 2, anyB)             // Extension.config
	return b
}

func wantNetworkAddress(network, addr string) *workload.NetworkAddress {
	return &workload.NetworkAddress{Network: network, Address: ip(addr)}
}

func wantGatewayByAddress() *workload.GatewayAddress {
	return &workload.GatewayAddress{
		Destination:   &workload.GatewayAddress_Address{Address: wantNetworkAddress("net-a", "10.0.0.9")},
		HboneMtlsPort: 15008,
	}
}

func wantGatewayByHostname() *workload.GatewayAddress {
	return &workload.GatewayAddress{
		Destination: &workload.GatewayAddress_Hostname{Hostname: &workload.NamespacedHostname{
			Namespace: "istio-system",
			Hostname:  "waypoint.istio-system.svc.cluster.local",
		}},
		HboneMtlsPort: 15009,
	}
}

func wantLoadBalancing() *workload.LoadBalancing {
	return &workload.LoadBalancing{
		RoutingPreference: []workload.LoadBalancing_Scope{
			workload.LoadBalancing_NETWORK,
			workload.LoadBalancing_REGION,
			workload.LoadBalancing_ZONE,
			workload.LoadBalancing_SUBZONE,
			workload.LoadBalancing_NODE,
			workload.LoadBalancing_CLUSTER,
		},
		Mode:               workload.LoadBalancing_FAILOVER,
		HealthPolicy:       workload.LoadBalancing_ALLOW_ALL,
		DnsConnectStrategy: workload.LoadBalancing_FIRST_HEALTHY_RACE,
	}
}

func wantExtension(t *testing.T) *workload.Extension {
	cfg, err := anypb.New(wrapperspb.String("x"))
	if err != nil {
		t.Fatal(err)
	}
	return &workload.Extension{Name: "sextant.io/ext", Config: cfg}
}

func workloadWire() []byte {
	var b []byte
	b = str(b, 1, "pod-1")                        // name
	b = str(b, 2, "ns1")                          // namespace
	b = raw(b, 3, ip("10.0.0.1"))                 // addresses[0]
	b = raw(b, 3, ip("fd00::1"))                  // addresses[1]
	b = str(b, 4, "net-a")                        // network
	b = varint(b, 5, 1)                           // tunnel_protocol = HBONE
	b = str(b, 6, "cluster.local")                // trust_domain
	b = str(b, 7, "sa1")                          // service_account
	b = msg(b, 8, gatewayByHostnameWire())        // waypoint
	b = str(b, 9, "node-1")                       // node
	b = str(b, 10, "app")                         // canonical_name
	b = str(b, 11, "v1")                          // canonical_revision
	b = varint(b, 12, 2)                          // workload_type = POD
	b = str(b, 13, "app-deploy")                  // workload_name
	b = varint(b, 14, 1)                          // native_tunnel
	b = str(b, 16, "ns1/allow-all")               // authorization_policies
	b = varint(b, 17, 1)                          // status = UNHEALTHY
	b = str(b, 18, "cluster-1")                   // cluster_id
	b = msg(b, 19, gatewayByAddressWire())        // network_gateway
	b = str(b, 20, "cluster-1//v1/Pod/ns1/pod-1") // uid
	b = str(b, 21, "pod-1.example.com")           // hostname
	b = msg(b, 22,                                // services (map entry)
		str(nil, 1, "ns1/svc1.ns1.svc.cluster.local"), // key
		msg(nil, 2, msg(nil, 1, portWire(80, 8080))),  // value: PortList{ports}
	)
	b = msg(b, 23, varint(nil, 1, 1), varint(nil, 2, 15088))                                  // application_tunnel {protocol=PROXY, port}
	b = msg(b, 24, str(nil, 1, "us-east1"), str(nil, 2, "us-east1-b"), str(nil, 3, "rack-7")) // locality
	b = varint(b, 25, 1)                                                                      // network_mode = HOST_NETWORK
	b = msg(b, 26, extensionWire())                                                           // extensions
	b = msg(b, 27, varint(nil, 1, 3))                                                         // capacity (UInt32Value.value)
	return b
}

func wantWorkload(t *testing.T) *workload.Workload {
	return &workload.Workload{
		Uid:               "cluster-1//v1/Pod/ns1/pod-1",
		Name:              "pod-1",
		Namespace:         "ns1",
		Addresses:         [][]byte{ip("10.0.0.1"), ip("fd00::1")},
		Hostname:          "pod-1.example.com",
		Network:           "net-a",
		TunnelProtocol:    workload.TunnelProtocol_HBONE,
		TrustDomain:       "cluster.local",
		ServiceAccount:    "sa1",
		Waypoint:          wantGatewayByHostname(),
		NetworkGateway:    wantGatewayByAddress(),
		Node:              "node-1",
		CanonicalName:     "app",
		CanonicalRevision: "v1",
		WorkloadType:      workload.WorkloadType_POD,
		WorkloadName:      "app-deploy",
		NativeTunnel:      true,
		ApplicationTunnel: &workload.ApplicationTunnel{Protocol: workload.ApplicationTunnel_PROXY, Port: 15088},
		Services: map[string]*workload.PortList{
			"ns1/svc1.ns1.svc.cluster.local": {Ports: []*workload.Port{{ServicePort: 80, TargetPort: 8080}}}},
		AuthorizationPolicies: []string{"ns1/allow-all"},
		Status:                workload.WorkloadStatus_UNHEALTHY,
		ClusterId:             "cluster-1",
		Locality:              &workload.Locality{Region: "us-east1", Zone: "us-east1-b", Subzone: "rack-7"},
		NetworkMode:           workload.NetworkMode_HOST_NETWORK,
		Extensions:            []*workload.Extension{wantExtension(t)},
		Capacity:              wrapperspb.UInt32(3),
	}
}

func serviceWire() []byte {
	var b []byte
	b = str(b, 1, "svc1")                                    // name
	b = str(b, 2, "ns1")                                     // namespace
	b = str(b, 3, "svc1.ns1.svc.cluster.local")              // hostname
	b = msg(b, 4, networkAddressWire("net-a", "10.96.0.10")) // addresses[0]
	b = msg(b, 4, networkAddressWire("net-b", "fd00::a"))    // addresses[1]
	b = msg(b, 5, portWire(80, 8080))                        // ports[0]
	b = msg(b, 5, portWire(443, 8443))                       // ports[1]
	b = str(b, 6, "spiffe://cluster.local/ns/ns1/sa/svc1")   // subject_alt_names
	b = msg(b, 7, gatewayByAddressWire())                    // waypoint
	b = msg(b, 8, loadBalancingWire())                       // load_balancing
	b = varint(b, 9, 3)                                      // ip_families = DUAL
	b = msg(b, 10, extensionWire())                          // extensions
	b = varint(b, 11, 1)                                     // canonical
	return b
}

func wantService(t *testing.T) *workload.Service {
	return &workload.Service{
		Name:            "svc1",
		Namespace:       "ns1",
		Hostname:        "svc1.ns1.svc.cluster.local",
		Addresses:       []*workload.NetworkAddress{wantNetworkAddress("net-a", "10.96.0.10"), wantNetworkAddress("net-b", "fd00::a")},
		Ports:           []*workload.Port{{ServicePort: 80, TargetPort: 8080}, {ServicePort: 443, TargetPort: 8443}},
		SubjectAltNames: []string{"spiffe://cluster.local/ns/ns1/sa/svc1"},
		Waypoint:        wantGatewayByAddress(),
		LoadBalancing:   wantLoadBalancing(),
		IpFamilies:      workload.IPFamilies_DUAL,
		Extensions:      []*workload.Extension{wantExtension(t)},
		Canonical:       true,
	}
}

func TestWorkloadWire(t *testing.T) {
	want := wantWorkload(t)
	allSet(t, want)
	check(t, workloadWire(), &workload.Workload{}, want)
}

func TestServiceWire(t *testing.T) {
	want := wantService(t)
	allSet(t, want)
	check(t, serviceWire(), &workload.Service{}, want)
}

func TestAddressWire(t *testing.T) {
	t.Run("workload", func(t *testing.T) {
		wire := msg(nil, 1, workloadWire()) // Address.workload (oneof type)
		check(t, wire, &workload.Address{}, &workload.Address{Type: &workload.Address_Workload{Workload: wantWorkload(t)}})
	})
	t.Run("service", func(t *testing.T) {
		wire := msg(nil, 2, serviceWire()) // Address.service (oneof type)
		check(t, wire, &workload.Address{}, &workload.Address{Type: &workload.Address_Service{Service: wantService(t)}})
	})
}

func TestGatewayAddressWire(t *testing.T) {
	t.Run("address", func(t *testing.T) {
		check(t, gatewayByAddressWire(), &workload.GatewayAddress{}, wantGatewayByAddress())
	})
	t.Run("hostname", func(t *testing.T) {
		check(t, gatewayByHostnameWire(), &workload.GatewayAddress{}, wantGatewayByHostname())
	})
	t.Run("reserved 4 is not a field", func(t *testing.T) {
		// hbone_single_tls_port used to be 4; it must stay unknown.
		got := &workload.GatewayAddress{}
		if err := proto.Unmarshal(varint(nil, 4, 15443), got); err != nil {
			t.Fatal(err)
		}
		if len(got.ProtoReflect().GetUnknown()) == 0 {
			t.Error("field 4 decoded into a known field")
		}
	})
}

func TestWorkloadReserved15(t *testing.T) {
	// 15 was virtual_ips; it must not decode into anything.
	got := &workload.Workload{}
	if err := proto.Unmarshal(str(nil, 15, "junk"), got); err != nil {
		t.Fatal(err)
	}
	if len(got.ProtoReflect().GetUnknown()) == 0 {
		t.Error("field 15 decoded into a known field")
	}
}

func TestNetworkAddressWire(t *testing.T) {
	want := wantNetworkAddress("net-a", "192.168.1.2")
	allSet(t, want)
	check(t, networkAddressWire("net-a", "192.168.1.2"), &workload.NetworkAddress{}, want)
}

func TestNamespacedHostnameWire(t *testing.T) {
	want := wantGatewayByHostname().GetHostname()
	allSet(t, want)
	check(t, namespacedHostnameWire(), &workload.NamespacedHostname{}, want)
}

func TestPortWire(t *testing.T) {
	want := &workload.Port{ServicePort: 8443, TargetPort: 70000} // target > 16 bits still a plain uint32
	allSet(t, want)
	check(t, portWire(8443, 70000), &workload.Port{}, want)
}

func TestPortListWire(t *testing.T) {
	wire := msg(nil, 1, portWire(80, 8080)) // PortList.ports[0]
	wire = msg(wire, 1, portWire(81, 8081)) // PortList.ports[1]
	want := &workload.PortList{Ports: []*workload.Port{{ServicePort: 80, TargetPort: 8080}, {ServicePort: 81, TargetPort: 8081}}}
	allSet(t, want)
	check(t, wire, &workload.PortList{}, want)
}

func TestLocalityWire(t *testing.T) {
	var wire []byte
	wire = str(wire, 1, "eu-west1")   // region
	wire = str(wire, 2, "eu-west1-a") // zone
	wire = str(wire, 3, "sz")         // subzone
	want := &workload.Locality{Region: "eu-west1", Zone: "eu-west1-a", Subzone: "sz"}
	allSet(t, want)
	check(t, wire, &workload.Locality{}, want)
}

func TestLoadBalancingWire(t *testing.T) {
	want := wantLoadBalancing()
	allSet(t, want)
	check(t, loadBalancingWire(), &workload.LoadBalancing{}, want)

	// A decoder must also take the unpacked form of routing_preference.
	var unpacked []byte
	unpacked = varint(unpacked, 1, 2) // routing_preference ZONE
	unpacked = varint(unpacked, 1, 4) // routing_preference NODE
	got := &workload.LoadBalancing{}
	if err := proto.Unmarshal(unpacked, got); err != nil {
		t.Fatal(err)
	}
	if rp := got.GetRoutingPreference(); len(rp) != 2 || rp[0] != workload.LoadBalancing_ZONE || rp[1] != workload.LoadBalancing_NODE {
		t.Errorf("unpacked routing_preference = %v", rp)
	}
}

func TestApplicationTunnelWire(t *testing.T) {
	wire := varint(nil, 1, 1)     // protocol = PROXY
	wire = varint(wire, 2, 15088) // port
	want := &workload.ApplicationTunnel{Protocol: workload.ApplicationTunnel_PROXY, Port: 15088}
	allSet(t, want)
	check(t, wire, &workload.ApplicationTunnel{}, want)
}

func TestExtensionWire(t *testing.T) {
	want := wantExtension(t)
	allSet(t, want)
	check(t, extensionWire(), &workload.Extension{}, want)
}

func TestEnumValues(t *testing.T) {
	cases := []struct {
		got  protoreflect.Enum
		want protoreflect.EnumNumber
	}{
		{workload.IPFamilies_AUTOMATIC, 0},
		{workload.IPFamilies_IPV4_ONLY, 1},
		{workload.IPFamilies_IPV6_ONLY, 2},
		{workload.IPFamilies_DUAL, 3},

		{workload.NetworkMode_STANDARD, 0},
		{workload.NetworkMode_HOST_NETWORK, 1},

		{workload.WorkloadStatus_HEALTHY, 0},
		{workload.WorkloadStatus_UNHEALTHY, 1},

		{workload.WorkloadType_DEPLOYMENT, 0},
		{workload.WorkloadType_CRONJOB, 1},
		{workload.WorkloadType_POD, 2},
		{workload.WorkloadType_JOB, 3},

		{workload.TunnelProtocol_NONE, 0},
		{workload.TunnelProtocol_HBONE, 1},

		{workload.ApplicationTunnel_NONE, 0},
		{workload.ApplicationTunnel_PROXY, 1},

		{workload.LoadBalancing_UNSPECIFIED_SCOPE, 0},
		{workload.LoadBalancing_REGION, 1},
		{workload.LoadBalancing_ZONE, 2},
		{workload.LoadBalancing_SUBZONE, 3},
		{workload.LoadBalancing_NODE, 4},
		{workload.LoadBalancing_CLUSTER, 5},
		{workload.LoadBalancing_NETWORK, 6},

		{workload.LoadBalancing_UNSPECIFIED_MODE, 0},
		{workload.LoadBalancing_STRICT, 1},
		{workload.LoadBalancing_FAILOVER, 2},
		{workload.LoadBalancing_PASSTHROUGH, 3},

		{workload.LoadBalancing_ONLY_HEALTHY, 0},
		{workload.LoadBalancing_ALLOW_ALL, 1},

		{workload.LoadBalancing_DEFAULT, 0},
		{workload.LoadBalancing_FIRST_HEALTHY_RACE, 1},
	}
	seen := map[protoreflect.FullName]int{}
	for _, c := range cases {
		d := c.got.Descriptor()
		if n := c.got.Number(); n != c.want {
			t.Errorf("%s.%s = %d, want %d", d.FullName(), d.Values().ByNumber(n).Name(), n, c.want)
		}
		seen[d.FullName()]++
	}
	// Every value of every enum in the file is listed above.
	enums := workload.File_workload_workload_proto.Enums()
	var all []protoreflect.EnumDescriptor
	for i := 0; i < enums.Len(); i++ {
		all = append(all, enums.Get(i))
	}
	msgs := workload.File_workload_workload_proto.Messages()
	for i := 0; i < msgs.Len(); i++ {
		nested := msgs.Get(i).Enums()
		for j := 0; j < nested.Len(); j++ {
			all = append(all, nested.Get(j))
		}
	}
	for _, e := range all {
		if seen[e.FullName()] != e.Values().Len() {
			t.Errorf("%s: %d values checked, schema has %d", e.FullName(), seen[e.FullName()], e.Values().Len())
		}
		delete(seen, e.FullName())
	}
	for name := range seen {
		t.Errorf("checked enum %s not in schema", name)
	}
}

func TestNames(t *testing.T) {
	// Type URLs and descriptors ztunnel sees.
	cases := map[proto.Message]protoreflect.FullName{
		&workload.Address{}:            "istio.workload.Address",
		&workload.Workload{}:           "istio.workload.Workload",
		&workload.Service{}:            "istio.workload.Service",
		&workload.Port{}:               "istio.workload.Port",
		&workload.PortList{}:           "istio.workload.PortList",
		&workload.NetworkAddress{}:     "istio.workload.NetworkAddress",
		&workload.GatewayAddress{}:     "istio.workload.GatewayAddress",
		&workload.NamespacedHostname{}: "istio.workload.NamespacedHostname",
		&workload.Locality{}:           "istio.workload.Locality",
		&workload.LoadBalancing{}:      "istio.workload.LoadBalancing",
		&workload.ApplicationTunnel{}:  "istio.workload.ApplicationTunnel",
		&workload.Extension{}:          "istio.workload.Extension",
	}
	for m, want := range cases {
		if got := m.ProtoReflect().Descriptor().FullName(); got != want {
			t.Errorf("%T full name = %s, want %s", m, got, want)
		}
	}
	if n := workload.File_workload_workload_proto.Messages().Len(); n != len(cases) {
		t.Errorf("schema has %d top-level messages, test names %d", n, len(cases))
	}
}
