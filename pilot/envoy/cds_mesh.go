package envoy

import (
	"strconv"
	"strings"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// defaultDNSRefreshRate is istiod's default meshConfig.dnsRefreshRate: with the TTL respected, Envoy uses
// it only after a failed lookup.
const defaultDNSRefreshRate = 60 * time.Second

// meshConnectTimeout is the connect timeout of every cluster whose connection pool sets none: the mesh
// config's connectTimeout (istiod's default 10 s when the file does not say).
func meshConnectTimeout(m *mesh.Config) *durationpb.Duration {
	if d := m.GetSpec().GetConnectTimeout(); d != nil {
		return durationpb.New(d.AsDuration())
	}
	return durationpb.New(defaultConnectTimeout)
}

// meshDNSRefreshRate is the dns_refresh_rate of STRICT_DNS and LOGICAL_DNS clusters, as istiod sets it.
func meshDNSRefreshRate(m *mesh.Config) *durationpb.Duration {
	if d := m.GetSpec().GetDnsRefreshRate(); d != nil {
		return durationpb.New(d.AsDuration())
	}
	return durationpb.New(defaultDNSRefreshRate)
}

// meshAutoMTLS reports whether clusters without a DestinationRule TLS setting get Istio's automatic mTLS
// (meshConfig.enableAutoMtls, on unless the file turns it off).
func meshAutoMTLS(m *mesh.Config) bool {
	if v := m.GetSpec().GetEnableAutoMtls(); v != nil {
		return v.GetValue()
	}
	return true
}

// meshH2Upgrade reports whether the mesh upgrades HTTP/1.1 clusters to HTTP/2 (h2UpgradePolicy UPGRADE).
func meshH2Upgrade(m *mesh.Config) bool {
	return m.GetSpec().GetH2UpgradePolicy() == meshconfig.MeshConfig_UPGRADE
}

// meshTCPKeepalive is the mesh config's tcpKeepalive, nil when it sets none.
func meshTCPKeepalive(m *mesh.Config) *networking.ConnectionPoolSettings_TCPSettings_TcpKeepalive {
	return m.GetSpec().GetTcpKeepalive()
}

// setTCPKeepalive turns SO_KEEPALIVE on for the cluster's connections and sets what ka sets over what is
// already there, as istiod lays a DestinationRule's keepalive over the mesh's field by field; the rest
// stays the OS's.
func setTCPKeepalive(c *cluster.Cluster, ka *networking.ConnectionPoolSettings_TCPSettings_TcpKeepalive) {
	if ka == nil {
		return
	}
	if c.UpstreamConnectionOptions == nil {
		c.UpstreamConnectionOptions = &cluster.UpstreamConnectionOptions{TcpKeepalive: &core.TcpKeepalive{}}
	}
	k := c.UpstreamConnectionOptions.TcpKeepalive
	if ka.Probes > 0 {
		k.KeepaliveProbes = optionalUInt32(ka.Probes)
	}
	if ka.Time != nil {
		k.KeepaliveTime = optionalSeconds(ka.Time)
	}
	if ka.Interval != nil {
		k.KeepaliveInterval = optionalSeconds(ka.Interval)
	}
}

// clusterStatName is the alt_stat_name istiod gives a cluster of svc's port when the mesh config sets a
// stat name pattern (inboundClusterStatName, outboundClusterStatName): the pattern with the service's
// names, the port and subset in it, ended by Istio's stat prefix delimiter.
func clusterStatName(pattern string, svc *model.Service, subset string, port *model.Port, targetPort uint32) string {
	return statPrefix(pattern, svc, subset, port, strconv.FormatUint(uint64(targetPort), 10)) + ";"
}

// statPrefix is pattern with svc's names, the subset, targetPort and port in it, as istiod's
// BuildStatPrefix; a targetPort of "%TARGET_PORT%" leaves that text as is, as istiod's inbound listeners do.
func statPrefix(pattern string, svc *model.Service, subset string, port *model.Port, targetPort string) string {
	short, name := svc.Hostname, svc.Hostname
	if svc.Source.Kind == config.Service {
		// A Kubernetes Service's names, as istiod's; other hosts (ServiceEntries) are their hostname.
		short, name = svc.Name+"."+svc.Namespace, svc.Name
	}
	// One after another in istiod's order, so that a value holding a pattern's text ends up as in istiod's.
	for _, r := range [][2]string{{"%SERVICE%", short}, {"%SERVICE_NAME%", name}, {"%SERVICE_FQDN%", svc.Hostname},
		{"%SUBSET_NAME%", subset}, {"%TARGET_PORT%", targetPort},
		{"%SERVICE_PORT%", strconv.FormatUint(uint64(port.Port), 10)}, {"%SERVICE_PORT_NAME%", port.Name}} {
		pattern = strings.ReplaceAll(pattern, r[0], r[1])
	}
	return pattern
}

// inboundStatName is the alt_stat_name of ip's inbound cluster under the mesh's inboundClusterStatName, as
// istiod's: by the first service reaching the port; for a Sidecar ingress port, by its listener's port and the
// service whose target port it is, else a stand-in named after the Sidecar (istiod's findOrCreateService).
// "" (the cluster's name) without a pattern.
func inboundStatName(m *mesh.Config, ip inboundPort, sidecar *config.Config) string {
	pattern := m.GetSpec().GetInboundClusterStatName()
	if pattern == "" {
		return ""
	}
	if !ip.ingress {
		if ip.svc == nil {
			return ""
		}
		for _, p := range ip.svc.Ports {
			if p.Port == ip.svcPort {
				return clusterStatName(pattern, ip.svc, "", p, ip.port)
			}
		}
		return ""
	}
	if sidecar == nil {
		return ""
	}
	port := &model.Port{Port: ip.port}
	for _, in := range sidecar.Spec.(*networking.Sidecar).GetIngress() {
		if in.GetPort().GetNumber() == ip.port {
			port.Name = in.GetPort().GetName()
			break
		}
	}
	svc := ip.svc
	if svc == nil {
		svc = &model.Service{Hostname: sidecar.Name + "." + sidecar.Namespace}
	}
	return clusterStatName(pattern, svc, "", port, ip.port)
}

// inboundTCPStatPrefix is the stat_prefix istiod gives the tcp_proxy of ip's inbound chains under the mesh's
// inboundClusterStatName: the pattern with the first service reaching the port, its port and port name; for
// a Sidecar ingress port, a stand-in named after the Sidecar with the ingress port. "" (the cluster's name)
// without a pattern. Unlike the cluster's, %TARGET_PORT% stays as written.
func inboundTCPStatPrefix(m *mesh.Config, ip inboundPort, sidecar *config.Config) string {
	pattern := m.GetSpec().GetInboundClusterStatName()
	if pattern == "" {
		return ""
	}
	if ip.ingress {
		if sidecar == nil {
			return ""
		}
		port := &model.Port{Port: ip.port}
		for _, in := range sidecar.Spec.(*networking.Sidecar).GetIngress() {
			if in.GetPort().GetNumber() == ip.port {
				port.Name = in.GetPort().GetName()
				break
			}
		}
		// istiod names a Sidecar ingress chain after the Sidecar even when a service reaches the port.
		return statPrefix(pattern, &model.Service{Hostname: sidecar.Name + "." + sidecar.Namespace}, "", port, "%TARGET_PORT%")
	}
	if ip.svc == nil {
		return ""
	}
	for _, p := range ip.svc.Ports {
		if p.Port == ip.svcPort {
			return statPrefix(pattern, ip.svc, "", p, "%TARGET_PORT%")
		}
	}
	return ""
}

// inboundPassthroughStatPrefix is the stat_prefix of the inbound passthrough chains' tcp_proxy under the
// mesh's inboundClusterStatName: istiod fills the pattern with no service, port 0 named virtualInbound.
// "" (the cluster's name) without a pattern.
func inboundPassthroughStatPrefix(m *mesh.Config) string {
	pattern := m.GetSpec().GetInboundClusterStatName()
	if pattern == "" {
		return ""
	}
	return statPrefix(pattern, &model.Service{}, "", &model.Port{Name: "virtualInbound"}, "%TARGET_PORT%")
}
