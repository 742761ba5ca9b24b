package config

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	meshconfig "istio.io/api/mesh/v1alpha1"
)

// MeshConfigSpec is the message of Istio's mesh config file (istio.mesh.v1alpha1.MeshConfig), whose fields
// the compatibility page lists after the kinds' and pilot/mesh reports by the same table.
func MeshConfigSpec() protoreflect.MessageDescriptor {
	return (&meshconfig.MeshConfig{}).ProtoReflect().Descriptor()
}

// CompatMeshRows walks MeshConfig as CompatRows walks a kind's spec; paths start at the file's top level
// (defaultConfig.tracing.zipkin.address).
func CompatMeshRows() []CompatRow { return compatRowsUnder("", MeshConfigSpec()) }

const (
	meshPkg      = "istio.mesh.v1alpha1."
	meshMsg      = meshPkg + "MeshConfig"
	proxyMsg     = meshPkg + "ProxyConfig"
	providerMsg  = meshPkg + "MeshConfig.ExtensionProvider"
	extAuthzHTTP = providerMsg + ".EnvoyExternalAuthorizationHttpProvider"
	extAuthzGRPC = providerMsg + ".EnvoyExternalAuthorizationGrpcProvider"
)

// meshCompatGroup gives fields of one message one status and note.
type meshCompatGroup struct {
	message protoreflect.FullName
	fields  []protoreflect.Name
	entry   CompatEntry
}

// meshCompatGroups lists every MeshConfig field (ProxyConfig's too, as defaultConfig) that is not plainly
// honoured, grouped by why. To honour a field: remove it here, read it in the generators (the test checks
// that they do), and render the page again. A field of a message the kinds share (TrafficPolicy, HTTPRetry,
// ClientTLSSettings) has the kinds' status unless a MeshConfig field above it is listed here.
var meshCompatGroups = []meshCompatGroup{
	{meshMsg, []protoreflect.Name{"proxy_http_port"}, CompatEntry{Status: Warned,
		Note: "no HTTP proxy listener (istiod's 127.0.0.1:PORT with the http_proxy routes) is built, as for a Sidecar's HTTP_PROXY " +
			"egress port"}},
	{meshMsg, []protoreflect.Name{"hbone_idle_timeout", "service_scope_configs"}, CompatEntry{Status: Warned,
		Note: "ambient mode (waypoints, HBONE): not what Sextant's ztunnel output reads"}},
	{meshMsg, []protoreflect.Name{"enable_tracing", "access_log_file", "access_log_format", "access_log_encoding",
		"enable_envoy_access_log_service", "disable_envoy_listener_log", "default_providers", "enable_prometheus_merge"},
		CompatEntry{Status: Warned, Note: "telemetry: Sextant generates no access log, tracing or metrics merging config"}},
	{meshMsg, []protoreflect.Name{"config_sources"}, CompatEntry{Status: Warned,
		Note: "Sextant reads config from --config-dir and the cluster, not from MCP servers"}},
	{meshMsg, []protoreflect.Name{"ca_certificates", "certificates", "ca", "verify_certificate_at_client"}, CompatEntry{Status: Warned,
		Note: "certificates come from Sextant's own CA and its roots; extra roots named here are not trusted (fail closed)"}},
	{meshMsg, []protoreflect.Name{"service_settings"}, CompatEntry{Status: Warned,
		Note: "clusterLocal hosts are not kept in the cluster: Sextant serves one cluster"}},
	{meshMsg, []protoreflect.Name{"default_inbound_http_retry_policy"}, CompatEntry{Status: Warned,
		Note: "istiod does not read it either: its sidecars' inbound routes, like Sextant's, keep reset-before-request with 2 " +
			"retries (none on gRPC ports) whatever it says"}},
	{meshMsg, []protoreflect.Name{"service_entry_visibility"}, CompatEntry{Status: Partly,
		Note: "sidecars and gateways follow it (applyToSidecars) as istiod's do; Sextant's ztunnel output does not carry the visibility"}},
	{meshMsg + ".OutboundTrafficPolicy", []protoreflect.Name{"tls"}, CompatEntry{Status: Warned,
		Note: "istiod reads it only under mode ALLOW_ANY_DYNAMIC_DNS (TLS on its dynamic forward proxy cluster for unknown " +
			"destinations), which Sextant refuses; under ALLOW_ANY and REGISTRY_ONLY istiod ignores it as Sextant does"}},
	{meshMsg, []protoreflect.Name{"tls_defaults"}, CompatEntry{Status: Honoured,
		Note: "gateways' SIMPLE and MUTUAL servers take all three; TLS origination (SIMPLE, MUTUAL) the curves and ciphers, as istiod's"}},
	{meshMsg, []protoreflect.Name{"mesh_mTLS"}, CompatEntry{Status: Honoured,
		Note: "inbound mesh mTLS's versions and ciphers; ecdhCurves is refused, as istiod refuses it"}},

	// Extension providers: the two ext_authz kinds CUSTOM AuthorizationPolicies name are honoured.
	{providerMsg, []protoreflect.Name{"zipkin", "lightstep", "datadog", "stackdriver", "opencensus", "skywalking", "opentelemetry",
		"prometheus", "envoy_file_access_log", "envoy_http_als", "envoy_tcp_als", "envoy_otel_als", "sds"}, CompatEntry{Status: Warned,
		Note: "telemetry providers: Sextant generates no tracing or logging config; a CUSTOM policy naming one is refused"}},
	{extAuthzHTTP, []protoreflect.Name{"clear_route_cache"}, CompatEntry{Status: Warned, Note: "the route cache is kept after the check"}},
	{extAuthzGRPC, []protoreflect.Name{"clear_route_cache"}, CompatEntry{Status: Warned, Note: "the route cache is kept after the check"}},

	// defaultConfig: istiod's agent turns these into the proxy's bootstrap and sends them back as the node's
	// PROXY_CONFIG; the control plane reads gatewayTopology.
	{proxyMsg, []protoreflect.Name{"config_path", "binary_path", "service_cluster", "drain_duration", "discovery_address",
		"discovery_refresh_delay", "statsd_udp_address", "envoy_metrics_service_address", "proxy_admin_port", "availability_zone",
		"control_plane_auth_policy", "custom_config_file", "stat_name_length", "concurrency", "proxy_bootstrap_template_path",
		"interception_mode", "sds", "envoy_metrics_service", "proxy_metadata", "runtime_values", "status_port", "extra_stat_tags",
		"termination_drain_duration", "mesh_id", "readiness_probe", "proxy_stats_matcher", "hold_application_until_proxy_starts",
		"ca_certificates_pem", "image", "file_flush_interval", "file_flush_min_size_kb", "stats_compression"}, CompatEntry{Status: Warned,
		Note: "agent-side: the agent builds the proxy's bootstrap from it; the generators read what the node sends"}},
	{proxyMsg, []protoreflect.Name{"tracing_service_name", "zipkin_address", "tracing", "envoy_access_log_service"},
		CompatEntry{Status: Warned, Note: "telemetry: Sextant generates no tracing or access log config"}},
	{proxyMsg, []protoreflect.Name{"private_key_provider"}, CompatEntry{Status: Warned,
		Note: "not implemented: the listeners and clusters keep Sextant's defaults"}},
	// forwardedClientCert and setCurrentClientCertDetails are honoured: istiod reads them for inbound listeners only.
	{proxyMsg + ".ProxyHeaders", []protoreflect.Name{"request_id", "server", "envoy_debug_headers", "x_forwarded_port"},
		CompatEntry{Status: Partly, Note: "per proxy (PROXY_CONFIG, else defaultConfig), as istiod: inbound and gateway listeners' " +
			"connection managers follow it; outbound listeners keep istiod's defaults"}},
	{proxyMsg + ".ProxyHeaders", []protoreflect.Name{"attempt_count", "x_forwarded_host", "metadata_exchange_headers",
		"preserve_http1_header_case"}, CompatEntry{Status: Warned,
		Note: "not implemented: istiod reads it into routes (attemptCount, xForwardedHost), the metadata exchange or the HTTP/1 " +
			"header case of listeners and clusters; Sextant keeps istiod's defaults"}},
	{proxyMsg, []protoreflect.Name{"connection_settings"}, CompatEntry{Status: Warned,
		Note: "not implemented: istiod reads it per proxy (PROXY_CONFIG, else defaultConfig) into every HTTP connection manager " +
			"(idle, drain, request, request-headers and stream-idle timeouts, connection and stream durations, HTTP/2 streams and " +
			"windows, underscore-header and escaped-slash actions, mergeSlashes) and into a gateway listener's per-connection buffer " +
			"limit, profile EDGE filling a gateway's unset ones; clusterPerConnectionBufferLimitBytes it does not read"}},
}

// meshNotImplemented is the entry of a field whose effect on the generated config is still to be built.
var meshNotImplemented = CompatEntry{Status: Warned, Note: "not implemented: Sextant's defaults (istiod's when unset) apply"}

// meshCompatTable is meshCompatGroups by field.
var meshCompatTable = func() map[CompatField]CompatEntry {
	out := map[CompatField]CompatEntry{}
	for _, g := range slices.Concat(meshCompatGroups, meshIngressGroups) {
		for _, f := range g.fields {
			out[CompatField{g.message, f}] = g.entry
		}
	}
	return out
}()

// MeshFieldEntry returns the entry that makes the mesh config field at path (as pilot/mesh reports it:
// defaultConfig.tracing.zipkin.address, extensionProviders[0].zipkin) not honoured: that of the outermost
// warned or rejected field on the path, else the field's own. A path MeshConfig lacks gives Honoured.
func MeshFieldEntry(path string) CompatEntry {
	m := MeshConfigSpec()
	var last CompatEntry
	for path != "" {
		// A map key in brackets may hold dots: the field's name ends at the first '[' or '.'.
		name := path[:strings.IndexAny(path+".", "[.")]
		path = strings.TrimPrefix(path[len(name):], ".")
		for strings.HasPrefix(path, "[") {
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return CompatEntry{Status: Honoured}
			}
			path = strings.TrimPrefix(path[end+1:], ".")
		}
		if m == nil {
			return CompatEntry{Status: Honoured}
		}
		f := m.Fields().ByJSONName(name)
		if f == nil {
			return CompatEntry{Status: Honoured}
		}
		last, _ = CompatStatus(f)
		if last.Status == Warned || last.Status == Rejected {
			return last
		}
		m = f.Message()
		if f.IsMap() {
			m = f.MapValue().Message()
		}
	}
	return last
}
