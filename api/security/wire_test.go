package security_test

// These tests pin the istio.security wire format to ztunnel's schema. Every
// field number below is written out literally (from ztunnel's
// proto/authorization.proto and Istio's pkg/workloadapi/security copy) rather
// than read from the generated code, so a renumbered or retyped field in
// authorization.proto fails here.

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
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sextantmesh/sextant/api/security"
)

func str(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func raw(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

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
// fields included. It then encodes want and requires the same top-level
// (number, wire type) pairs as the hand-built bytes, order aside.
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

// allSet requires every non-oneof field of m to be populated.
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

func addressWire(addr string, length uint64) []byte {
	var b []byte
	b = raw(b, 1, ip(addr))  // Address.address
	b = varint(b, 2, length) // Address.length
	return b
}

func exactWire(s string) []byte  { return str(nil, 1, s) } // StringMatch.exact
func prefixWire(s string) []byte { return str(nil, 2, s) } // StringMatch.prefix
func suffixWire(s string) []byte { return str(nil, 3, s) } // StringMatch.suffix
func presenceWire() []byte       { return msg(nil, 4) }    // StringMatch.presence (Empty)

func saWire(ns, sa string) []byte {
	var b []byte
	b = str(b, 1, ns) // ServiceAccountMatch.namespace
	b = str(b, 2, sa) // ServiceAccountMatch.serviceAccount
	return b
}

func matchWire() []byte {
	var b []byte
	b = msg(b, 1, exactWire("ns1"))                     // namespaces
	b = msg(b, 1, presenceWire())                       // namespaces
	b = msg(b, 2, prefixWire("kube-"))                  // not_namespaces
	b = msg(b, 3, suffixWire("/sa/client"))             // principals
	b = msg(b, 4, exactWire("cluster.local/ns/x/sa/y")) // not_principals
	b = msg(b, 5, addressWire("10.0.0.0", 8))           // source_ips
	b = msg(b, 6, addressWire("10.1.2.3", 32))          // not_source_ips
	b = msg(b, 7, addressWire("fd00::", 64))            // destination_ips
	b = msg(b, 8, addressWire("192.168.0.1", 32))       // not_destination_ips
	b = packed(b, 9, 80, 8080)                          // destination_ports
	b = packed(b, 10, 15008)                            // not_destination_ports
	b = msg(b, 11, saWire("ns1", "client"))             // service_accounts
	b = msg(b, 12, saWire("ns2", "blocked"))            // not_service_accounts
	return b
}

func wantMatch() *security.Match {
	exact := func(s string) *security.StringMatch {
		return &security.StringMatch{MatchType: &security.StringMatch_Exact{Exact: s}}
	}
	return &security.Match{
		Namespaces: []*security.StringMatch{
			exact("ns1"),
			{MatchType: &security.StringMatch_Presence{Presence: &emptypb.Empty{}}},
		},
		NotNamespaces:       []*security.StringMatch{{MatchType: &security.StringMatch_Prefix{Prefix: "kube-"}}},
		ServiceAccounts:     []*security.ServiceAccountMatch{{Namespace: "ns1", ServiceAccount: "client"}},
		NotServiceAccounts:  []*security.ServiceAccountMatch{{Namespace: "ns2", ServiceAccount: "blocked"}},
		Principals:          []*security.StringMatch{{MatchType: &security.StringMatch_Suffix{Suffix: "/sa/client"}}},
		NotPrincipals:       []*security.StringMatch{exact("cluster.local/ns/x/sa/y")},
		SourceIps:           []*security.Address{{Address: ip("10.0.0.0"), Length: 8}},
		NotSourceIps:        []*security.Address{{Address: ip("10.1.2.3"), Length: 32}},
		DestinationIps:      []*security.Address{{Address: ip("fd00::"), Length: 64}},
		NotDestinationIps:   []*security.Address{{Address: ip("192.168.0.1"), Length: 32}},
		DestinationPorts:    []uint32{80, 8080},
		NotDestinationPorts: []uint32{15008},
	}
}

func clauseWire() []byte {
	return msg(nil, 2, matchWire()) // Clause.matches (1 is unused)
}

func wantClause() *security.Clause {
	return &security.Clause{Matches: []*security.Match{wantMatch()}}
}

func ruleWire() []byte {
	return msg(nil, 1, clauseWire()) // Rule.clauses
}

func wantRule() *security.Rule {
	return &security.Rule{Clauses: []*security.Clause{wantClause()}}
}

func TestAuthorizationWire(t *testing.T) {
	var wire []byte
	wire = str(wire, 1, "deny-kube") // name
	wire = str(wire, 2, "ns1")       // namespace
	wire = varint(wire, 3, 2)        // scope = WORKLOAD_SELECTOR
	wire = varint(wire, 4, 1)        // action = DENY
	wire = msg(wire, 5, ruleWire())  // rules[0]
	wire = msg(wire, 5)              // rules[1], empty
	wire = varint(wire, 6, 1)        // dry_run
	want := &security.Authorization{
		Name:      "deny-kube",
		Namespace: "ns1",
		Scope:     security.Scope_WORKLOAD_SELECTOR,
		Action:    security.Action_DENY,
		Rules:     []*security.Rule{wantRule(), {}},
		DryRun:    true,
	}
	allSet(t, want)
	check(t, wire, &security.Authorization{}, want)
}

func TestRuleWire(t *testing.T) {
	want := wantRule()
	allSet(t, want)
	check(t, ruleWire(), &security.Rule{}, want)
}

func TestClauseWire(t *testing.T) {
	want := wantClause()
	allSet(t, want)
	check(t, clauseWire(), &security.Clause{}, want)

	// Field 1 of Clause is not a field (upstream keeps match_behavior commented out).
	got := &security.Clause{}
	if err := proto.Unmarshal(varint(nil, 1, 1), got); err != nil {
		t.Fatal(err)
	}
	if len(got.ProtoReflect().GetUnknown()) == 0 {
		t.Error("Clause field 1 decoded into a known field")
	}
}

func TestMatchWire(t *testing.T) {
	want := wantMatch()
	allSet(t, want)
	check(t, matchWire(), &security.Match{}, want)

	// Ports must also decode from the unpacked form.
	var unpacked []byte
	unpacked = varint(unpacked, 9, 443)   // destination_ports
	unpacked = varint(unpacked, 10, 9090) // not_destination_ports
	got := &security.Match{}
	if err := proto.Unmarshal(unpacked, got); err != nil {
		t.Fatal(err)
	}
	if p := got.GetDestinationPorts(); len(p) != 1 || p[0] != 443 {
		t.Errorf("destination_ports = %v", p)
	}
	if p := got.GetNotDestinationPorts(); len(p) != 1 || p[0] != 9090 {
		t.Errorf("not_destination_ports = %v", p)
	}
}

func TestAddressWire(t *testing.T) {
	want := &security.Address{Address: ip("2001:db8::"), Length: 32}
	allSet(t, want)
	check(t, addressWire("2001:db8::", 32), &security.Address{}, want)
}

func TestServiceAccountMatchWire(t *testing.T) {
	want := &security.ServiceAccountMatch{Namespace: "ns1", ServiceAccount: "client"}
	allSet(t, want)
	check(t, saWire("ns1", "client"), &security.ServiceAccountMatch{}, want)
}

func TestStringMatchWire(t *testing.T) {
	cases := []struct {
		name string
		wire []byte
		want *security.StringMatch
	}{
		{"exact", exactWire("a"), &security.StringMatch{MatchType: &security.StringMatch_Exact{Exact: "a"}}},
		{"prefix", prefixWire("b"), &security.StringMatch{MatchType: &security.StringMatch_Prefix{Prefix: "b"}}},
		{"suffix", suffixWire("c"), &security.StringMatch{MatchType: &security.StringMatch_Suffix{Suffix: "c"}}},
		{"presence", presenceWire(), &security.StringMatch{MatchType: &security.StringMatch_Presence{Presence: &emptypb.Empty{}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			check(t, c.wire, &security.StringMatch{}, c.want)
		})
	}
	if n := (&security.StringMatch{}).ProtoReflect().Descriptor().Fields().Len(); n != len(cases) {
		t.Errorf("StringMatch has %d fields, test covers %d", n, len(cases))
	}
}

func TestEnumValues(t *testing.T) {
	cases := []struct {
		got  protoreflect.Enum
		want protoreflect.EnumNumber
	}{
		{security.Scope_GLOBAL, 0},
		{security.Scope_NAMESPACE, 1},
		{security.Scope_WORKLOAD_SELECTOR, 2},
		{security.Action_ALLOW, 0},
		{security.Action_DENY, 1},
	}
	seen := map[protoreflect.FullName]int{}
	for _, c := range cases {
		d := c.got.Descriptor()
		if n := c.got.Number(); n != c.want {
			t.Errorf("%s.%s = %d, want %d", d.FullName(), d.Values().ByNumber(n).Name(), n, c.want)
		}
		seen[d.FullName()]++
	}
	enums := security.File_security_authorization_proto.Enums()
	for i := 0; i < enums.Len(); i++ {
		e := enums.Get(i)
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
	cases := map[proto.Message]protoreflect.FullName{
		&security.Authorization{}:       "istio.security.Authorization",
		&security.Rule{}:                "istio.security.Rule",
		&security.Clause{}:              "istio.security.Clause",
		&security.Match{}:               "istio.security.Match",
		&security.Address{}:             "istio.security.Address",
		&security.ServiceAccountMatch{}: "istio.security.ServiceAccountMatch",
		&security.StringMatch{}:         "istio.security.StringMatch",
	}
	for m, want := range cases {
		if got := m.ProtoReflect().Descriptor().FullName(); got != want {
			t.Errorf("%T full name = %s, want %s", m, got, want)
		}
	}
	if n := security.File_security_authorization_proto.Messages().Len(); n != len(cases) {
		t.Errorf("schema has %d messages, test names %d", n, len(cases))
	}
}
