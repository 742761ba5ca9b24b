package envoy

import (
	"net"
	"slices"
	"strconv"
	"strings"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sextantmesh/sextant/pilot/model"
)

// grpcListenerKey: an API listener depends on its name only (its routes come from RDS under that name).
type grpcListenerKey struct{ name string }

// grpcListeners returns API listeners for a proxyless gRPC client: the HTTP ports of every service in scope
// for a wildcard subscription, plus every name asked for that resolves to a service port; then the
// listeners asked for by xDS-enabled gRPC servers on the workload's ports (lds_grpc_inbound.go).
func (l listenerGenerator) grpcListeners(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource) (model.Resources, error) {
	var names []string
	seen := map[string]bool{}
	if w == nil || w.Wildcard {
		for _, svc := range l.g.scopeFor(proxy, push).Services {
			for _, p := range svc.Ports {
				if name := net.JoinHostPort(svc.Hostname, ldsPortName(p.Port)); p.Protocol.IsHTTP() && !seen[name] {
					seen[name] = true
					names = append(names, name)
				}
			}
		}
	}
	var servers []string // listeners of xDS-enabled gRPC servers, asked for by name only
	if w != nil {
		requested := make([]string, 0, w.ResourceNames.Len())
		for _, name := range w.ResourceNames.Sorted() {
			switch {
			case strings.HasPrefix(name, GRPCServerListenerPrefix):
				servers = append(servers, name)
			case !seen[name] && grpcTarget(push, proxy.Namespace, name) != nil:
				requested = append(requested, name)
			}
		}
		slices.Sort(requested)
		names = append(names, requested...)
	}
	out := make(model.Resources, 0, len(names)+len(servers))
	for _, name := range names {
		r, err := l.g.cached(grpcListenerKey{name}, name, func() proto.Message { return buildAPIListener(name) })
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	for _, name := range servers {
		r, err := l.grpcInboundListener(proxy, push, name)
		if err != nil {
			return nil, err
		}
		if r != nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// grpcTarget resolves a listener name HOST:PORT, where HOST is a full hostname or a short one ("svc",
// "svc.ns", "svc.ns.svc") completed from the client's namespace, to the service port it names.
func grpcTarget(push *model.PushContext, proxyNS, name string) *model.Port {
	host, portStr, err := net.SplitHostPort(name)
	if err != nil || host == "" {
		return nil
	}
	port, err := strconv.ParseUint(portStr, 10, 32)
	if err != nil {
		return nil
	}
	for _, h := range grpcCandidates(host, proxyNS, push.Mesh.DomainSuffix) {
		if svc := push.ServiceForHostname(proxyNS, h); svc != nil {
			return svc.PortByNumber(uint32(port))
		}
	}
	return nil
}

// grpcCandidates is the host as written, then as completed by a pod's DNS search path.
func grpcCandidates(host, ns, suffix string) []string {
	out := []string{host}
	switch strings.Count(host, ".") {
	case 0:
		out = append(out, host+"."+ns+".svc."+suffix)
	case 1:
		out = append(out, host+".svc."+suffix)
	}
	if strings.HasSuffix(host, ".svc") {
		out = append(out, host+"."+suffix)
	}
	return out
}

// buildAPIListener is the listener gRPC's xDS resolver asks for: a connection manager with routes from RDS
// under the same name, and the router as the only (and last) HTTP filter.
func buildAPIListener(name string) *listener.Listener {
	hc := ldsRDSManager(name, name, []*hcm.HttpFilter{ldsRouterFilter()})
	return &listener.Listener{Name: name, ApiListener: &listener.ApiListener{ApiListener: ldsAny(hc)}}
}
