package xds

import (
	"slices"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pkg/loglimit"
	"github.com/sextantmesh/sextant/pkg/nameset"
)

// StreamAggregatedResources serves state-of-the-world ADS.
func (s *Server) StreamAggregatedResources(stream grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) error {
	return serve(s, stream, false, stream.Recv, (*Connection).handleSotW, (*Connection).pushSotW)
}

// handleSotW handles a request: a new subscription is answered at once; a request whose nonce is not the
// latest sent is stale (the client has not seen our newest response yet and will ask again) and ignored;
// otherwise it ACKs or NACKs the latest response and may change the subscribed names. With noSend, a
// request that needs a response is left untouched and reported (needsSend).
func (c *Connection) handleSotW(req *discovery.DiscoveryRequest, noSend bool) (needsSend bool, err error) {
	typeURL := req.GetTypeUrl()
	if c.report(typeURL, req.GetErrorDetail()) {
		return false, nil
	}
	gen, err := c.requestGenerator(typeURL)
	if gen == nil {
		return false, err
	}
	names, star := canonicalNames(req.GetResourceNames())
	w := c.watched[typeURL]
	if w == nil {
		if noSend {
			return true, nil
		}
		// Also a reconnect: whatever nonce or version the client had from another server, it gets full state.
		w = &watch{WatchedResource: model.WatchedResource{TypeURL: typeURL, ResourceNames: names, Wildcard: star}}
		if len(req.GetResourceNames()) == 0 && c.srv.policyOf(typeURL).LegacyWildcard {
			w.Wildcard, w.legacy = true, true
		}
		c.watch(w)
		return false, c.respondSotW(gen, w, c.srv.snapshot(nil), nil)
	}
	if req.GetResponseNonce() != w.NonceSent {
		c.srv.log.Debug("stale request ignored", "conn", c.id, "type", typeURL, "nonce",
			loglimit.Text(req.GetResponseNonce()), "latest", w.NonceSent)
		return false, nil
	}
	wildcard, legacy := star, false
	if len(req.GetResourceNames()) == 0 && w.legacy {
		wildcard, legacy = true, true // an empty list keeps a legacy wildcard
	}
	changed := wildcard != w.Wildcard || names != w.ResourceNames
	if changed && noSend {
		return true, nil
	}
	if req.GetErrorDetail() != nil {
		c.nack(w, req.GetResponseNonce(), req.GetErrorDetail().GetMessage())
		if v := req.GetVersionInfo(); v != "" {
			// In a NACK, version_info is what the proxy still runs.
			c.mu.Lock()
			w.VersionAcked = v
			c.mu.Unlock()
		}
		// A NACK still carries the names the proxy wants now (e.g. EDS for a cluster added meanwhile):
		// a changed subscription is answered below, or the new names would wait for the next push.
	} else {
		c.ack(w, req.GetVersionInfo(), req.GetResponseNonce())
	}
	if !changed {
		return false, nil // a plain ACK
	}
	c.mu.Lock()
	w.ResourceNames, w.Wildcard, w.legacy = names, wildcard, legacy
	c.mu.Unlock()
	return false, c.respondSotW(gen, w, c.srv.snapshot(nil), nil)
}

// pushSotW sends every type req concerns, in make-before-break order.
func (c *Connection) pushSotW(req *model.PushRequest) error {
	push := c.srv.snapshot(req)
	for _, w := range c.pushTypes(req) {
		if tc := w.counters; tc != nil {
			tc.pushes.Add(1)
		}
		if err := c.observePush(w, push, req, func() error {
			gen := w.gen
			if dg, ok := gen.(model.DeltaGenerator); ok && req != nil && !req.Full && !w.policy.LegacyWildcard {
				// Responses of types that are not legacy wildcards (EDS, RDS) need not repeat unchanged
				// resources: send only what the push changed.
				return c.respondSotWPartial(dg, w, push, req)
			}
			return c.respondSotW(gen, w, push, req)
		}); err != nil {
			return err
		}
	}
	return nil
}

// respondSotWPartial sends the resources an incremental push changed, for types whose responses are not
// the full state (not legacy wildcards). Nothing changed for this proxy: nothing is sent.
func (c *Connection) respondSotWPartial(dg model.DeltaGenerator, w *watch, push *model.PushContext, req *model.PushRequest) error {
	res, _, incremental, err := dg.GenerateDeltas(c.proxy, push, &w.WatchedResource, req)
	if err != nil {
		c.generateFailed(w.TypeURL, err)
		return nil
	}
	if !incremental {
		return c.respondSotW(dg, w, push, req)
	}
	version, nonce := c.nextResponse(push)
	resp := &discovery.DiscoveryResponse{TypeUrl: w.TypeURL, VersionInfo: version, Nonce: nonce}
	for _, r := range res {
		if r != nil && r.Any != nil && w.Subscribed(r.Name) {
			resp.Resources = append(resp.Resources, r.Any)
		}
	}
	if len(resp.Resources) == 0 {
		return nil
	}
	if err := c.send(resp, w.TypeURL); err != nil {
		return err
	}
	c.sent(w, version, nonce)
	c.observeSent(w, nonce, push)
	return nil
}

// respondSotW sends the full state of w's type. It is sent even when empty: a client waiting for a name
// that does not exist learns so now rather than by a timeout.
func (c *Connection) respondSotW(gen model.Generator, w *watch, push *model.PushContext, req *model.PushRequest) error {
	res, ok := c.generate(gen, &w.WatchedResource, push, req)
	if !ok {
		return nil
	}
	version, nonce := c.nextResponse(push)
	resp := &discovery.DiscoveryResponse{TypeUrl: w.TypeURL, VersionInfo: version, Nonce: nonce,
		Resources: make([]*anypb.Any, 0, len(res))}
	for _, r := range res {
		if r != nil && r.Any != nil && w.Subscribed(r.Name) {
			resp.Resources = append(resp.Resources, r.Any) // shared, never modified
		}
	}
	if err := c.send(resp, w.TypeURL); err != nil {
		return err
	}
	c.sent(w, version, nonce)
	c.observeSent(w, nonce, push)
	return nil
}

// canonicalNames returns the canonical set of a request's names ("*" excluded) and whether "*" was among
// them.
func canonicalNames(names []string) (*nameset.Set, bool) {
	star := false
	add := make([]string, 0, len(names))
	for _, n := range names {
		if n == "*" {
			star = true
			continue
		}
		add = append(add, n)
	}
	slices.Sort(add)
	return (*nameset.Set)(nil).With(slices.Compact(add), nil), star
}
