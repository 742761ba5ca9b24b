package mesh

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/sextantmesh/sextant/pilot/config"
)

// sextantFields are the fields of the mesh config file that are Sextant's, not Istio's MeshConfig (istiod
// takes them from flags and its environment): Config reads them, and the MeshConfig is read without them.
var sextantFields = []string{"clusterID", "network", "jwksFetch", "domainSuffix"}

// sextantProxyFields are Sextant's fields of defaultConfig.
var sextantProxyFields = []string{"domainSuffix"}

// defaultSpec is istiod's mesh.DefaultMeshConfig(): what a proxy gets when the file does not say. The
// extension providers istiod predefines are telemetry ones, which Sextant does not generate.
func defaultSpec() *meshconfig.MeshConfig {
	return &meshconfig.MeshConfig{
		EnableTracing:            true,
		AccessLogEncoding:        meshconfig.MeshConfig_TEXT,
		ProtocolDetectionTimeout: durationpb.New(0),
		IngressService:           "istio-ingressgateway",
		IngressControllerMode:    meshconfig.MeshConfig_STRICT,
		IngressClass:             "istio",
		TrustDomain:              "cluster.local",
		EnableAutoMtls:           wrapperspb.Bool(true),
		OutboundTrafficPolicy:    &meshconfig.MeshConfig_OutboundTrafficPolicy{Mode: meshconfig.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY},
		InboundTrafficPolicy:     &meshconfig.MeshConfig_InboundTrafficPolicy{Mode: meshconfig.MeshConfig_InboundTrafficPolicy_PASSTHROUGH},
		LocalityLbSetting:        &networking.LocalityLoadBalancerSetting{Enabled: wrapperspb.Bool(true)},
		DefaultConfig: &meshconfig.ProxyConfig{
			ConfigPath:               "./etc/istio/proxy",
			ClusterName:              &meshconfig.ProxyConfig_ServiceCluster{ServiceCluster: "istio-proxy"},
			DrainDuration:            durationpb.New(45 * time.Second),
			TerminationDrainDuration: durationpb.New(5 * time.Second),
			ProxyAdminPort:           15000,
			ControlPlaneAuthPolicy:   meshconfig.AuthenticationPolicy_MUTUAL_TLS,
			DiscoveryAddress:         "istiod.istio-system.svc:15012",
			BinaryPath:               "/usr/local/bin/envoy",
			StatNameLength:           189,
			StatusPort:               15020,
		},
		RootNamespace:                  "istio-system",
		ProxyListenPort:                15001,
		ProxyInboundListenPort:         15006,
		ConnectTimeout:                 durationpb.New(10 * time.Second),
		DefaultServiceExportTo:         []string{"*"},
		DefaultVirtualServiceExportTo:  []string{"*"},
		DefaultDestinationRuleExportTo: []string{"*"},
		DnsRefreshRate:                 durationpb.New(60 * time.Second),
		EnablePrometheusMerge:          wrapperspb.Bool(true),
		DefaultProviders:               &meshconfig.MeshConfig_DefaultProviders{},
	}
}

// parseSpec reads data as Istio's MeshConfig, as istiod does (YAML to protobuf JSON), over base: a field
// the file sets replaces base's, and defaultConfig is merged field by field, as istiod merges it. Unlike
// istiod, a field MeshConfig lacks is refused, naming it. It returns the paths of the warned fields the
// file sets (config.CompatStatus), and refuses rejected ones.
func parseSpec(data []byte, base *meshconfig.MeshConfig) (*meshconfig.MeshConfig, []string, error) {
	var top map[string]any
	if err := yaml.Unmarshal(data, &top); err != nil {
		return nil, nil, err
	}
	for _, f := range sextantFields {
		delete(top, f)
	}
	if pc, ok := top["defaultConfig"].(map[string]any); ok {
		pc = maps.Clone(pc)
		for _, f := range sextantProxyFields {
			delete(pc, f)
		}
		top["defaultConfig"] = pc
	}
	var warned []string
	if err := checkMessage("", top, config.MeshConfigSpec(), false, &warned); err != nil {
		return nil, nil, err
	}
	js, err := json.Marshal(top)
	if err != nil {
		return nil, nil, err
	}
	file := &meshconfig.MeshConfig{}
	if err := protojson.Unmarshal(js, file); err != nil {
		return nil, nil, err
	}
	// As istiod's validation: mesh mTLS takes no curves (its TLS 1.3 handshake would not honour them).
	if file.GetMeshMTLS().GetEcdhCurves() != nil {
		return nil, nil, errors.New("field meshMTLS.ecdhCurves: not supported: mesh mTLS does not take ECDH curves (set tlsDefaults.ecdhCurves)")
	}
	if err := config.ValidateLocalityLbSetting("localityLbSetting", file.GetLocalityLbSetting()); err != nil {
		return nil, nil, err
	}
	// The capture listeners listen on these ports; istiod's validation refuses a proxyListenPort that is no port.
	for _, p := range []struct {
		name string
		port int32
	}{{"proxyListenPort", file.GetProxyListenPort()}, {"proxyInboundListenPort", file.GetProxyInboundListenPort()}} {
		if _, set := top[p.name]; set && (p.port < 1 || p.port > 65535) {
			return nil, nil, fmt.Errorf("field %s: %d is not a port (1-65535)", p.name, p.port)
		}
	}
	spec := proto.Clone(base).(*meshconfig.MeshConfig)
	overlayFields(spec.ProtoReflect(), file.ProtoReflect(), top)
	if pc, ok := top["defaultConfig"].(map[string]any); ok {
		proxy := proto.Clone(base.GetDefaultConfig()).(*meshconfig.ProxyConfig)
		if proxy == nil {
			proxy = &meshconfig.ProxyConfig{}
		}
		metadata := proxy.GetProxyMetadata()
		overlayFields(proxy.ProtoReflect(), file.GetDefaultConfig().ProtoReflect(), pc)
		if len(metadata) > 0 { // istiod merges the proxy metadata maps
			proxy.ProxyMetadata = mergeStrings(metadata, file.GetDefaultConfig().GetProxyMetadata())
		}
		spec.DefaultConfig = proxy
	}
	slices.Sort(warned)
	return spec, slices.Compact(warned), nil
}

func mergeStrings(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// overlayFields sets on dst each field of src that the file names in keys, a zero value too.
func overlayFields(dst, src protoreflect.Message, keys map[string]any) {
	fields := dst.Descriptor().Fields()
	for k := range keys {
		f := fieldByName(fields, k)
		if f == nil {
			continue
		}
		if src.Has(f) {
			dst.Set(f, src.Get(f))
		} else {
			dst.Clear(f)
		}
	}
}

// fieldByName finds a field as protobuf JSON names it: its JSON name or its protobuf name.
func fieldByName(fields protoreflect.FieldDescriptors, name string) protoreflect.FieldDescriptor {
	if f := fields.ByJSONName(name); f != nil {
		return f
	}
	return fields.ByName(protoreflect.Name(name))
}

func joinPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// checkMessage checks obj, the JSON object of message m at path, field by field: each named, each value
// read as protobuf JSON reads it. warned says a field above is warned; the set fields under it, and the
// warned fields set, are added to out by path.
func checkMessage(path string, obj map[string]any, m protoreflect.MessageDescriptor, warned bool, out *[]string) error {
	oneofs := map[protoreflect.FullName]string{}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v := obj[k]
		f := fieldByName(m.Fields(), k)
		if f == nil {
			return fmt.Errorf("field %s: unknown field: %s has no field %s", joinPath(path, k), m.FullName(), k)
		}
		if v == nil {
			continue
		}
		p := joinPath(path, f.JSONName())
		if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
			if other, ok := oneofs[o.FullName()]; ok {
				return fmt.Errorf("field %s: %s is set too; one of them may be", p, other)
			}
			oneofs[o.FullName()] = f.JSONName()
		}
		e, _ := config.CompatStatus(f)
		if !warned && e.Status == config.Rejected {
			return fmt.Errorf("field %s: not supported: %s", p, e.Note)
		}
		if err := checkValue(m, f, v, p); err != nil {
			return err
		}
		below := warned || e.Status == config.Warned
		// A partly honoured field warns for the values its entry lists, or for any value when it lists none.
		if !below && e.Status == config.Partly && (len(e.Values) == 0 || slices.Contains(e.Values, fmt.Sprint(v))) {
			*out = append(*out, p)
		}
		if err := checkChildren(p, f, v, below, out); err != nil {
			return err
		}
	}
	return nil
}

// child is a message value found below a field: its path and its JSON object.
type child struct {
	path string
	obj  map[string]any
}

// checkChildren walks into a message field's value; a field under a warned one is reported where nothing
// is set below it.
func checkChildren(p string, f protoreflect.FieldDescriptor, v any, warned bool, out *[]string) error {
	value := f.Message()
	if f.IsMap() {
		value = f.MapValue().Message()
	}
	var children []child
	if value != nil && !strings.HasPrefix(string(value.FullName()), "google.protobuf.") {
		switch x := v.(type) {
		case []any:
			for i, e := range x {
				if o, ok := e.(map[string]any); ok {
					children = append(children, child{p + "[" + strconv.Itoa(i) + "]", o})
				}
			}
		case map[string]any:
			if !f.IsMap() {
				children = append(children, child{p, x})
				break
			}
			for _, k := range slices.Sorted(maps.Keys(x)) {
				if o, ok := x[k].(map[string]any); ok {
					children = append(children, child{p + "[" + k + "]", o})
				}
			}
		}
	}
	if warned && len(children) == 0 {
		*out = append(*out, p)
	}
	for _, c := range children {
		if warned && len(c.obj) == 0 {
			*out = append(*out, c.path)
		}
		if err := checkMessage(c.path, c.obj, value, warned, out); err != nil {
			return err
		}
	}
	return nil
}

// checkValue reads field f's value alone as protobuf JSON does, so that a bad value is refused with its
// path; the message's own fields are checked when it is walked.
func checkValue(m protoreflect.MessageDescriptor, f protoreflect.FieldDescriptor, v any, p string) error {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(m.FullName())
	if err != nil {
		return err
	}
	if value := f.Message(); value != nil && !strings.HasPrefix(string(value.FullName()), "google.protobuf.") && !f.IsMap() {
		v = shape(v)
	}
	js, err := json.Marshal(map[string]any{f.JSONName(): v})
	if err != nil {
		return err
	}
	if err := protojson.Unmarshal(js, mt.New().Interface()); err != nil {
		var msg string
		if i := strings.Index(err.Error(), "): "); i >= 0 {
			msg = err.Error()[i+3:]
		} else {
			msg = err.Error()
		}
		return fmt.Errorf("field %s: %w", p, errors.New(msg))
	}
	return nil
}

// shape keeps the JSON shape of a message value (an object, or a list of them) without its fields, which
// are checked one by one below it.
func shape(v any) any {
	switch x := v.(type) {
	case map[string]any:
		return map[string]any{}
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = shape(e)
		}
		return out
	}
	return v
}
