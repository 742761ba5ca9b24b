package envoy

// VHDS: the virtual hosts of a sidecar's per-port route configurations, one resource each.
//
// An Envoy sidecar on a delta stream, recent enough to accept VHDS over ADS (Options.VHDSMinEnvoy), gets
// route configuration "PORT" with only the "allow_any" catch-all inline and a vhds config source; the
// services' virtual hosts come as VirtualHost resources named "PORT/HOSTNAME:PORT" (Envoy files a virtual
// host under the route configuration named before the last "/", and keys it by VirtualHost.name, so both
// names are the same string). Envoy subscribes to VHDS with no names — everything — and the transport sends
// the virtual hosts of a route configuration only after the route configuration itself. Adding a service
// then costs each sidecar one virtual host per HTTP port instead of its whole table.
//
// The virtual hosts are exactly those of the inline route configuration (sidecarVirtualHosts), claims of
// shared domains included, so the table Envoy assembles is the one a proxy without VHDS receives.

import (
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/xds"
)

type virtualHostGenerator struct{ g *Generators }

// vhostsKey identifies the VHDS virtual hosts of one sidecar route configuration.
type vhostsKey struct{ routeKey }

// vhostsDependOnLabel marks a vhostsKey whose virtual hosts depend on the proxy's labels.
var vhostsDependOnLabel = xds.Resources{routeDependsOnLabel}

// Generate returns the virtual hosts of every route configuration of the proxy's scope; the transport holds
// back those whose route configuration the proxy does not have yet. Proxies not using VHDS get none.
func (v virtualHostGenerator) Generate(proxy *xds.Proxy, push *model.PushContext, _ *xds.WatchedResource, _ *model.PushRequest) (xds.Resources, error) {
	g := v.g
	if !g.usesVHDS(proxy) {
		return nil, nil
	}
	scope := g.scopeFor(proxy, push)
	var out xds.Resources
	for _, port := range sidecarRoutePorts(scope) {
		list, err := g.virtualHosts(proxy, push, scope, strconv.FormatUint(uint64(port), 10), port)
		if err != nil {
			return nil, err
		}
		out = append(out, list...)
	}
	return out, nil
}

// virtualHosts returns the marshaled VHDS virtual hosts of route configuration name, shared by the proxies
// of a scope (and of a label set, when a VirtualService's sourceLabels made them depend on it).
func (g *Generators) virtualHosts(proxy *xds.Proxy, push *model.PushContext, scope *Scope, name string, port uint32) (xds.Resources, error) {
	key := vhostsKey{routeKey{routing: routingID(push), proxyType: xds.Sidecar, name: name, scope: scope, vhds: true}}
	list, ok := g.lists.Get(key)
	if ok && len(list) == 1 && list[0] == routeDependsOnLabel {
		key.labels, key.labelled = labelsKey(proxy.Labels), true
		list, ok = g.lists.Get(key)
	}
	if ok {
		return list, nil
	}
	b := &routeBuilder{push: push, proxy: proxy, scope: scope}
	vhosts, _ := b.sidecarVirtualHosts(port)
	list = make(xds.Resources, 0, len(vhosts))
	for _, vh := range vhosts {
		vh.Name = name + "/" + vh.Name
		r, err := marshal(vh.Name, proto.Message(vh))
		if err != nil {
			return nil, err
		}
		list = append(list, r)
	}
	if b.usedLabels && !key.labelled {
		g.lists.Add(key, vhostsDependOnLabel)
		key.labels, key.labelled = labelsKey(proxy.Labels), true
	}
	g.lists.Add(key, list)
	return list, nil
}
