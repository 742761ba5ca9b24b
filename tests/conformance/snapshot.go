package conformance

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Kind is what a normalised resource describes.
type Kind string

const (
	KindCluster   Kind = "cluster"
	KindEndpoints Kind = "endpoints"
	KindRoute     Kind = "route"
)

// Key names a resource by what it serves, never by how a control plane spells its name, so istiod's
// outbound|9080|v1|reviews.default.svc.cluster.local and any other naming of the same destination meet.
type Key struct {
	Kind Kind
	// Inbound is true for a sidecar's clusters and endpoints towards its own workload (Host is empty).
	Inbound bool
	// SNIDNAT is true for a gateway's SNI-DNAT cluster of Host:Port (Subset), outbound_.PORT_.SUBSET_.HOST,
	// and its endpoints.
	SNIDNAT bool
	Host    string
	Port    uint32
	Subset  string
}

// String is the key as the diff and the allowlist write it: "cluster reviews.default.svc.cluster.local:9080 v1",
// "cluster inbound:9080", "cluster sni-dnat reviews.default.svc.cluster.local:9080 v1", "cluster PassthroughCluster",
// "route reviews.default.svc.cluster.local:9080".
func (k Key) String() string {
	if k.Kind == KindRejected {
		return string(k.Kind)
	}
	host := k.Host
	if k.Inbound {
		host = "inbound"
	}
	if k.SNIDNAT {
		host = "sni-dnat " + host
	}
	if k.Kind == KindCluster && k.Port == 0 {
		return string(k.Kind) + " " + host // a passthrough cluster, by its name
	}
	port := strconv.FormatUint(uint64(k.Port), 10)
	if k.Kind == KindListener && k.Port == 0 {
		port = "other-port"
	}
	s := string(k.Kind) + " " + host + ":" + port
	if k.Subset != "" {
		s += " " + k.Subset
	}
	return s
}

// Fields is one resource's behaviour, flattened: a field path (e.g. "circuit_breakers.default.max_connections")
// to its effective value, Envoy's default filled in where the resource leaves a field unset. Flat fields let
// every difference name the one field that differs.
type Fields map[string]string

// Snapshot is what one proxy receives, normalised.
type Snapshot map[Key]Fields

// Difference is one field of one resource on which the two control planes disagree.
type Difference struct {
	Case, Proxy string
	Key         Key
	Field       string
	Istiod      string
	Sextant     string
}

// ID is the difference as an allowlist entry names it: "case / proxy / key / field".
func (d Difference) ID() string {
	return d.Case + " / " + d.Proxy + " / " + d.Key.String() + " / " + d.Field
}

func (d Difference) String() string {
	return fmt.Sprintf("%s\n    istiod:  %s\n    sextant: %s", d.ID(), d.Istiod, d.Sextant)
}

// normalise is the one path both control planes' output goes through. probes are the destinations asked of
// the listeners, gathered from both sides (ProbesOf).
func normalise(o *Output, p Proxy, probes Probes) (Snapshot, error) {
	s := Snapshot{}
	if err := normaliseClusters(s, o.Clusters); err != nil {
		return nil, err
	}
	normaliseEndpoints(s, o.Endpoints)
	resolveEndpointTransport(s)
	normaliseRoutes(s, o.Routes, routeHosts(s))
	normaliseListeners(s, o.Listeners, p.Type, p.IP, probes)
	return s, nil
}

// resolveEndpointTransport replaces each endpoint's class by the transport its cluster gives that class
// (plaintext or tls): how an endpoint's metadata is spelled matters only through the match it selects.
// Locality weights are dropped where the cluster does not weight localities: Envoy ignores them there.
func resolveEndpointTransport(s Snapshot) {
	for k, f := range s {
		if k.Kind != KindEndpoints {
			continue
		}
		ck := k
		ck.Kind = KindCluster
		c := s[ck]
		for name := range f {
			if strings.HasSuffix(name, ".locality_weight") && c["lb.locality_weighted"] != "true" {
				delete(f, name)
			}
		}
		for name, class := range f {
			if addr, ok := strings.CutSuffix(name, ".class"); ok {
				delete(f, name)
				mode := c["tls("+class+").mode"]
				if mode == "" {
					mode = "no cluster"
				}
				f[addr+".transport"] = mode
			}
		}
	}
}

// unset is printed for a field one side does not have at all.
const unset = "<unset>"

// absentField is the field a difference names when a whole resource exists on one side only.
const absentField = "(resource)"

// Compare lists the differences between istiod's and Sextant's snapshots of one proxy, sorted by key and
// field so the diff reads the same on every run.
func Compare(caseName, proxy string, istiod, sextant Snapshot) []Difference {
	keys := map[Key]bool{}
	for k := range istiod {
		keys[k] = true
	}
	for k := range sextant {
		keys[k] = true
	}
	sorted := make([]Key, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].String() < sorted[j].String() })
	var out []Difference
	for _, k := range sorted {
		a, inA := istiod[k]
		b, inB := sextant[k]
		if !inA || !inB {
			out = append(out, Difference{Case: caseName, Proxy: proxy, Key: k, Field: absentField,
				Istiod: presence(inA), Sextant: presence(inB)})
			continue
		}
		fields := map[string]bool{}
		for f := range a {
			fields[f] = true
		}
		for f := range b {
			fields[f] = true
		}
		names := make([]string, 0, len(fields))
		for f := range fields {
			names = append(names, f)
		}
		sort.Strings(names)
		for _, f := range names {
			va, okA := a[f]
			vb, okB := b[f]
			if okA && okB && va == vb {
				continue
			}
			if !okA {
				va = unset
			}
			if !okB {
				vb = unset
			}
			out = append(out, Difference{Case: caseName, Proxy: proxy, Key: k, Field: f, Istiod: va, Sextant: vb})
		}
	}
	return out
}

func presence(ok bool) string {
	if ok {
		return "present"
	}
	return "absent"
}

// joinSorted renders a set of values independent of the order a control plane emits them in.
func joinSorted(values []string) string {
	s := append([]string(nil), values...)
	sort.Strings(s)
	return strings.Join(s, ",")
}

// Text renders the snapshot one resource after another, fields sorted, for reading.
func (s Snapshot) Text() string {
	keys := make([]Key, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k.String() + "\n")
		names := make([]string, 0, len(s[k]))
		for f := range s[k] {
			names = append(names, f)
		}
		sort.Strings(names)
		for _, f := range names {
			b.WriteString("    " + f + " = " + s[k][f] + "\n")
		}
	}
	return b.String()
}
