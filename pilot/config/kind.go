package config

import (
	"fmt"
	"slices"
	"strings"
)

// Kind names a config kind as users write it in YAML.
type Kind string

// The kinds Sextant reads.
const (
	Namespace             Kind = "Namespace"
	Service               Kind = "Service"
	Pod                   Kind = "Pod"
	Node                  Kind = "Node"
	EndpointSlice         Kind = "EndpointSlice"
	ServiceEntry          Kind = "ServiceEntry"
	WorkloadEntry         Kind = "WorkloadEntry"
	DestinationRule       Kind = "DestinationRule"
	VirtualService        Kind = "VirtualService"
	Gateway               Kind = "Gateway"
	Sidecar               Kind = "Sidecar"
	AuthorizationPolicy   Kind = "AuthorizationPolicy"
	PeerAuthentication    Kind = "PeerAuthentication"
	RequestAuthentication Kind = "RequestAuthentication"
	// Secret holds the certificates Gateway and DestinationRule credentialName name, served over SDS.
	Secret Kind = "Secret"
	// ProxyConfig holds agent-side settings the sidecar injector applies; read to be validated and reported.
	ProxyConfig Kind = "ProxyConfig"
	// WorkloadGroup is the template of the WorkloadEntries VM agents register when they connect (pilot/autoregister).
	WorkloadGroup Kind = "WorkloadGroup"
	// Ingress is a Kubernetes Ingress: those istiod would serve become a Gateway and VirtualServices
	// (pilot/model/ingress.go), as istiod converts them.
	Ingress Kind = "Ingress"
	// IngressClass names the controller of the Ingresses whose spec.ingressClassName is its name.
	IngressClass Kind = "IngressClass"
)

// FetchedJWKS is no source's kind: it holds what Sextant fetched from a RequestAuthentication's jwksUri
// (pilot/jwks stores it, one object per URI), so a key change reaches the snapshot and the proxies as any
// config change does, while generators never do I/O. It is not in Kinds().
const FetchedJWKS Kind = "FetchedJWKS"

// KindInfo describes where a kind lives in the Kubernetes API.
type KindInfo struct {
	Kind       Kind
	Group      string
	Versions   []string // accepted versions; the first is the one Sextant watches
	Plural     string
	Namespaced bool
}

// APIVersion returns group/version for the preferred version.
func (k KindInfo) APIVersion() string {
	if k.Group == "" {
		return k.Versions[0]
	}
	return k.Group + "/" + k.Versions[0]
}

var kinds = []KindInfo{
	{Namespace, "", []string{"v1"}, "namespaces", false},
	{Service, "", []string{"v1"}, "services", true},
	{Pod, "", []string{"v1"}, "pods", true},
	{Node, "", []string{"v1"}, "nodes", false},
	{EndpointSlice, "discovery.k8s.io", []string{"v1"}, "endpointslices", true},
	{ServiceEntry, "networking.istio.io", []string{"v1", "v1beta1", "v1alpha3"}, "serviceentries", true},
	{WorkloadEntry, "networking.istio.io", []string{"v1", "v1beta1", "v1alpha3"}, "workloadentries", true},
	{DestinationRule, "networking.istio.io", []string{"v1", "v1beta1", "v1alpha3"}, "destinationrules", true},
	{VirtualService, "networking.istio.io", []string{"v1", "v1beta1", "v1alpha3"}, "virtualservices", true},
	{Gateway, "networking.istio.io", []string{"v1", "v1beta1", "v1alpha3"}, "gateways", true},
	{Sidecar, "networking.istio.io", []string{"v1", "v1beta1", "v1alpha3"}, "sidecars", true},
	{AuthorizationPolicy, "security.istio.io", []string{"v1", "v1beta1"}, "authorizationpolicies", true},
	{PeerAuthentication, "security.istio.io", []string{"v1", "v1beta1"}, "peerauthentications", true},
	{RequestAuthentication, "security.istio.io", []string{"v1", "v1beta1"}, "requestauthentications", true},
	{Secret, "", []string{"v1"}, "secrets", true},
	{ProxyConfig, "networking.istio.io", []string{"v1beta1"}, "proxyconfigs", true},
	{WorkloadGroup, "networking.istio.io", []string{"v1", "v1beta1", "v1alpha3"}, "workloadgroups", true},
	{Ingress, "networking.k8s.io", []string{"v1"}, "ingresses", true},
	{IngressClass, "networking.k8s.io", []string{"v1"}, "ingressclasses", false},
}

// Builtin reports whether the kind is one of Kubernetes' own, served by every cluster and read as its
// typed object, rather than an Istio CRD.
func (k KindInfo) Builtin() bool {
	return k.Group == "" || k.Group == "discovery.k8s.io" || k.Group == "networking.k8s.io"
}

// Kinds returns every kind Sextant reads, in a stable order.
func Kinds() []KindInfo { return kinds }

// Info returns the description of kind k.
func Info(k Kind) (KindInfo, bool) {
	for _, ki := range kinds {
		if ki.Kind == k {
			return ki, true
		}
	}
	return KindInfo{}, false
}

// unreadKinds are kinds Istio users apply that Sextant does not read (versions newest first). A document of
// one is rejected, naming the kind as unread; in a cluster their objects are counted and reported, since
// they change nothing Sextant serves and must not look as if they did.
var unreadKinds = []KindInfo{
	{"EnvoyFilter", "networking.istio.io", []string{"v1alpha3"}, "envoyfilters", true},
	{"Telemetry", "telemetry.istio.io", []string{"v1", "v1alpha1"}, "telemetries", true},
	{"WasmPlugin", "extensions.istio.io", []string{"v1alpha1"}, "wasmplugins", true},
	{"GatewayClass", "gateway.networking.k8s.io", []string{"v1", "v1beta1"}, "gatewayclasses", false},
	{"Gateway", "gateway.networking.k8s.io", []string{"v1", "v1beta1"}, "gateways", true},
	{"HTTPRoute", "gateway.networking.k8s.io", []string{"v1", "v1beta1"}, "httproutes", true},
	{"GRPCRoute", "gateway.networking.k8s.io", []string{"v1", "v1alpha2"}, "grpcroutes", true},
	{"TCPRoute", "gateway.networking.k8s.io", []string{"v1alpha2"}, "tcproutes", true},
	{"TLSRoute", "gateway.networking.k8s.io", []string{"v1alpha2"}, "tlsroutes", true},
	{"UDPRoute", "gateway.networking.k8s.io", []string{"v1alpha2"}, "udproutes", true},
	{"ReferenceGrant", "gateway.networking.k8s.io", []string{"v1beta1", "v1alpha2"}, "referencegrants", true},
	{"BackendTLSPolicy", "gateway.networking.k8s.io", []string{"v1", "v1alpha3"}, "backendtlspolicies", true},
}

// UnreadKinds returns the kinds Sextant knows of but does not read, in a stable order.
func UnreadKinds() []KindInfo { return unreadKinds }

// UnreadKindError is LookupKind's error for a kind of UnreadKinds.
type UnreadKindError struct {
	Kind       KindInfo
	APIVersion string // as written
}

func (e *UnreadKindError) Error() string {
	msg := fmt.Sprintf("kind %s of apiVersion %q is not read by Sextant: this document would have no effect", e.Kind.Kind, e.APIVersion)
	if ki, ok := Info(e.Kind.Kind); ok {
		// The Gateway API Gateway shares its name with Istio's: the document may mean the other one.
		msg += fmt.Sprintf(" (Sextant reads %s of %s/%s)", ki.Kind, ki.Group, strings.Join(ki.Versions, "|"))
	}
	return msg
}

// LookupKind resolves apiVersion and kind as written in a document.
func LookupKind(apiVersion, kind string) (KindInfo, error) {
	group, version := "", apiVersion
	if i := strings.LastIndexByte(apiVersion, '/'); i >= 0 {
		group, version = apiVersion[:i], apiVersion[i+1:]
	}
	for _, ki := range unreadKinds {
		if string(ki.Kind) == kind && ki.Group == group {
			return KindInfo{}, &UnreadKindError{Kind: ki, APIVersion: apiVersion}
		}
	}
	for _, ki := range kinds {
		if string(ki.Kind) != kind {
			continue
		}
		if ki.Group == group && slices.Contains(ki.Versions, version) {
			return ki, nil
		}
		want := strings.Join(ki.Versions, "|")
		if ki.Group != "" {
			want = ki.Group + "/" + want
		}
		return KindInfo{}, fmt.Errorf("apiVersion %q is not served for kind %s (want %s)", apiVersion, kind, want)
	}
	return KindInfo{}, fmt.Errorf("unknown kind %q (apiVersion %q)", kind, apiVersion)
}

// IsEndpointKind reports whether changes of kind k only move endpoints and workloads,
// so they can be applied without rebuilding the PushContext's other indexes.
func IsEndpointKind(k Kind) bool {
	switch k {
	case EndpointSlice, Pod, WorkloadEntry, Node:
		return true
	}
	return false
}
