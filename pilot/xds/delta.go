package xds

import (
	"maps"
	"slices"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pkg/nameset"
)

// DeltaAggregatedResources serves incremental (delta) ADS.
func (s *Server) DeltaAggregatedResources(
	stream grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse],
) error {
	return serve(s, stream, true, stream.Recv, (*Connection).handleDelta, (*Connection).pushDelta)
}

// handleDelta handles a delta request. With noSend, a request that changes what is subscribed (and may need
// a response) is left untouched and reported (needsSend); an ACK or NACK is handled.
func (c *Connection) handleDelta(req *discovery.DeltaDiscoveryRequest, noSend bool) (needsSend bool, err error) {
	if c.report(req.GetTypeUrl(), req.GetErrorDetail()) {
		return false, nil
	}
	if noSend {
		w := c.watched[req.GetTypeUrl()]
		if w == nil || len(req.GetResourceNamesSubscribe()) > 0 || len(req.GetResourceNamesUnsubscribe()) > 0 {
			return true, nil
		}
	}
	return false, c.handleDeltaRequest(req)
}

// handleDeltaRequest handles a delta request. Unlike state-of-the-world, the nonce only serves ACK/NACK:
// subscription changes are incremental and always applied, and every name a request asks about is answered
// (the resource, or the name in removed_resources), as the protocol requires: a client may subscribe again
// to a name it dropped, and Envoy forgets a name it unsubscribes while "*" still covers it until the server
// says again whether it exists.
func (c *Connection) handleDeltaRequest(req *discovery.DeltaDiscoveryRequest) error {
	typeURL := req.GetTypeUrl()
	gen, err := c.requestGenerator(typeURL)
	if gen == nil {
		return err
	}
	sub, unsub := req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe()
	w, first := c.deltaWatch(req, typeURL, sub, unsub)
	if !first && len(sub) == 0 && len(unsub) == 0 {
		return nil
	}
	ch := c.subscribe(w, sub, unsub, first)
	c.forgetChildren(typeURL, ch.gone)
	return c.answerSubscription(gen, w, first, ch)
}

// deltaWatch returns the type's watch, started by this request (first) or acknowledged by it.
func (c *Connection) deltaWatch(req *discovery.DeltaDiscoveryRequest, typeURL string, sub, unsub []string) (w *watch, first bool) {
	w = c.watched[typeURL]
	if first = w == nil; first {
		// What the client already has (after a reconnect): unchanged resources are not sent again. "*" names
		// no resource (it is the wildcard): kept, it came back as a removed resource named "*".
		initial := maps.Clone(req.GetInitialResourceVersions())
		delete(initial, "*")
		w = &watch{WatchedResource: model.WatchedResource{TypeURL: typeURL}, sent: sentSet{m: initial}}
		// Only a first request naming nothing at all is the legacy wildcard: "*" subscribed and unsubscribed
		// at once (on-demand ztunnel's first request) subscribes to nothing.
		if len(sub) == 0 && len(unsub) == 0 && c.srv.policyOf(typeURL).LegacyWildcard {
			w.Wildcard, w.legacy = true, true
		}
		if len(initial) > 0 {
			c.resumed = true
		}
		c.forgetOwed(w)
		c.watch(w)
	} else if nonce := req.GetResponseNonce(); nonce != "" && nonce == w.NonceSent {
		if req.GetErrorDetail() != nil {
			c.nack(w, nonce, req.GetErrorDetail().GetMessage())
		} else {
			c.ack(w, w.VersionSent, nonce)
		}
	}
	return w, first
}

// subscriptionChange is what one request changed of a delta subscription.
type subscriptionChange struct {
	asked         map[string]struct{} // names to answer now
	ambiguous     []string            // unsubscribed while "*" stays
	wildcardAdded bool
	gone          []string // what the client forgot
}

// subscribe applies a request's subscriptions and unsubscriptions to w.
func (c *Connection) subscribe(w *watch, sub, unsub []string, first bool) subscriptionChange {
	c.mu.Lock()
	names := w.ResourceNames
	wasWildcard := w.Wildcard
	wildcard := wasWildcard
	added := map[string]struct{}{} // new to the subscription
	asked := map[string]struct{}{} // to answer now
	for _, n := range sub {
		if n == "*" {
			wildcard = true
			continue
		}
		n = intern(n)
		asked[n] = struct{}{}
		if !names.Has(n) {
			added[n] = struct{}{}
		}
	}
	var removedNames, unsubscribed []string
	for _, n := range unsub {
		if n == "*" {
			wildcard = false
			continue
		}
		delete(asked, n)
		if _, ok := added[n]; ok {
			delete(added, n)
		} else if names.Has(n) {
			removedNames = append(removedNames, n)
		}
		unsubscribed = append(unsubscribed, n)
	}
	wildcardAdded := wildcard && !wasWildcard
	// Unsubscribed while "*" stays: Envoy holds such a name as ambiguous and waits for the server to say
	// whether the wildcard covers it.
	var ambiguous []string
	if wildcard {
		ambiguous = unsubscribed
	}
	slices.Sort(removedNames)
	removedNames = slices.Compact(removedNames)
	addedNames := slices.Sorted(maps.Keys(added))
	if len(addedNames) > 0 || len(removedNames) > 0 {
		// The canonical set for the new names: sidecars making the same change end up sharing it.
		w.ResourceNames = names.With(addedNames, removedNames)
	}
	w.Wildcard = wildcard
	if !wildcard {
		w.legacy = false
	}
	// The client forgets what it unsubscribes from, and may have forgotten what it subscribes to again.
	var gone []string
	forget := func(n string) {
		if _, had := w.sent.get(n); had {
			gone = append(gone, n)
			w.sent.del(n)
		}
	}
	if !first {
		for _, n := range unsubscribed {
			forget(n)
		}
		for n := range asked {
			forget(n)
		}
		for _, n := range ambiguous {
			forget(n)
		}
	}
	if wasWildcard && !wildcard { // what only the wildcard covered is gone too
		var only []string
		w.sent.names(func(n string) {
			if !w.Subscribed(n) {
				only = append(only, n)
			}
		})
		for _, n := range only {
			forget(n)
		}
	}
	w.sent.follow(w.ResourceNames)
	c.mu.Unlock()
	return subscriptionChange{asked: asked, ambiguous: ambiguous, wildcardAdded: wildcardAdded, gone: gone}
}

// answerSubscription sends what a subscription change owes the client.
func (c *Connection) answerSubscription(gen model.Generator, w *watch, first bool, ch subscriptionChange) error {
	// On a first request the names asked about are the subscription: its canonical set, shared with the
	// other sidecars, rather than a set of their own per sidecar in a cold start.
	askedNames := w.ResourceNames
	if !first {
		askedNames = nameset.New(slices.Collect(maps.Keys(ch.asked))...)
	}
	push := c.srv.snapshot(nil)
	if first || ch.wildcardAdded {
		// Always answered, even with nothing, so the client knows its fetch of everything is complete.
		return c.respondDelta(gen, w, push, nil, askedNames, true)
	}
	if len(ch.ambiguous) > 0 {
		if err := c.answerWildcard(gen, w, push, nameset.New(ch.ambiguous...)); err != nil {
			return err
		}
	}
	if askedNames.Len() == 0 {
		return nil // only unsubscriptions: nothing to send
	}
	// Generate just the names asked about (e.g. EDS for new clusters), not everything watched. With 900
	// clusters watched, regenerating all of them for each proxy on every new cluster was most of the
	// server's CPU in a service add.
	return c.answerNames(gen, w, push, askedNames)
}

// answerWildcard tells the client, for each of names, whether its wildcard subscription covers it: the
// resource, or the name as removed.
func (c *Connection) answerWildcard(gen model.Generator, w *watch, push *model.PushContext, names *nameset.Set) error {
	all, ok := c.generate(gen, &w.WatchedResource, push, nil)
	if !ok {
		return nil
	}
	var res model.Resources
	for _, r := range all {
		if r != nil && names.Has(r.Name) {
			res = append(res, r)
		}
	}
	_, err := c.sendDelta(w, push, res, nil, names, false, false, false)
	return err
}

// answerNames sends the current state of the given names of w: each resource, or its name as removed.
func (c *Connection) answerNames(gen model.Generator, w *watch, push *model.PushContext, names *nameset.Set) error {
	view := w.WatchedResource
	view.ResourceNames, view.Wildcard = names, false
	res, ok := c.generate(gen, &view, push, nil)
	if !ok {
		return nil
	}
	_, err := c.sendDelta(w, push, res, nil, names, false, false, false)
	return err
}

// pushDelta sends what changed for every type req concerns, in make-before-break order: removals of the
// types whose policy says RemoveLast go last, after the types that stopped naming them, so a rename never
// leaves a resource naming one the proxy has already dropped (an Envoy route naming a removed cluster).
func (c *Connection) pushDelta(req *model.PushRequest) error {
	push := c.srv.snapshot(req)
	type heldPush struct {
		removal pendingRemoval
		obs     pushObservation
		failed  bool
	}
	var later []heldPush
	defer func() { c.pushing = nil }()
	for _, w := range c.pushTypes(req) {
		if tc := w.counters; tc != nil {
			tc.pushes.Add(1)
		}
		obs := c.observe(w, push, req)
		held, err := c.pushDeltaType(w, push, req)
		if failed := err != nil || c.genFailed; held.names != nil && err == nil {
			later = append(later, heldPush{held, obs, failed})
		} else {
			obs.done(failed)
		}
		if err != nil {
			return err
		}
	}
	for _, h := range later {
		c.pushing = req
		err := c.sendRemovals(h.removal, push)
		h.obs.done(h.failed || err != nil)
		if err != nil {
			return err
		}
	}
	return nil
}

// pushDeltaType sends what req changed of w's type. Removals of a type whose policy says RemoveLast are
// returned, not sent.
func (c *Connection) pushDeltaType(w *watch, push *model.PushContext, req *model.PushRequest) (pendingRemoval, error) {
	var res model.Resources
	var removed []string
	incremental := false
	if dg, ok := w.gen.(model.DeltaGenerator); ok {
		var err error
		if res, removed, incremental, err = dg.GenerateDeltas(c.proxy, push, &w.WatchedResource, req); err != nil {
			c.generateFailed(w.TypeURL, err)
			return pendingRemoval{}, nil
		}
	} else if res, ok = c.generate(w.gen, &w.WatchedResource, push, req); !ok {
		return pendingRemoval{}, nil
	}
	if !incremental {
		removed = nil
	}
	return c.sendDelta(w, push, res, removed, nil, !incremental, false, w.policy.RemoveLast)
}

// pendingRemoval is what a push removes from w, held back by sendDelta until the push's other types are
// sent. next is the client's whole state once the removals are sent, when sendDelta could keep it whole.
type pendingRemoval struct {
	w     *watch
	names []string
	next  model.Resources
}

// sendRemovals sends a response that only removes p's names.
func (c *Connection) sendRemovals(p pendingRemoval, push *model.PushContext) error {
	resp, versions := c.deltaScratch()
	defer func() { c.putDeltaScratch(resp, versions) }()
	w := p.w
	resp.TypeUrl = w.TypeURL
	resp.RemovedResources = append(resp.RemovedResources, p.names...)
	resp.SystemVersionInfo, resp.Nonce = c.nextResponse(push)
	if err := c.send(resp, w.TypeURL); err != nil {
		return err
	}
	c.mu.Lock()
	if p.next != nil {
		w.sent.whole(p.next)
	} else {
		for _, n := range p.names {
			w.sent.del(n)
		}
	}
	w.VersionSent, w.NonceSent, w.LastSent = resp.SystemVersionInfo, resp.Nonce, time.Now()
	c.mu.Unlock()
	c.observeSent(w, resp.Nonce, push)
	return nil
}

// respondDelta generates the full state of w's type and sends the difference from what the client has.
// added holds names just subscribed: those that do not exist are reported removed, as the protocol asks.
func (c *Connection) respondDelta(gen model.Generator, w *watch, push *model.PushContext, req *model.PushRequest,
	added *nameset.Set, always bool) error {
	res, ok := c.generate(gen, &w.WatchedResource, push, req)
	if !ok {
		return nil
	}
	_, err := c.sendDelta(w, push, res, nil, added, true, always, false)
	return err
}

// sendDelta sends the resources whose version differs from what the client has. With full, res is the
// whole state and anything the client has that is not in it is removed; otherwise removed lists removals.
// With holdRemovals, removals of names the client has are not sent but returned, for sendRemovals.
func (c *Connection) sendDelta(w *watch, push *model.PushContext, res model.Resources, removed []string,
	added *nameset.Set, full, always, holdRemovals bool) (held pendingRemoval, err error) {
	resp, versions := c.deltaScratch()
	defer func() { c.putDeltaScratch(resp, versions) }()
	resp.TypeUrl = w.TypeURL
	var scan deltaScan
	versions, scan = c.scanDelta(w, resp, versions, res, full)
	c.deltaRemovals(w, resp, res, removed, added, full, scan.known)
	// What the client will have is res itself only after a full, unfiltered state.
	nextFull := res
	if !full || !w.Wildcard || scan.filtered || !scan.inOrder {
		nextFull = nil
	}
	if holdRemovals && len(resp.RemovedResources) > 0 {
		held = pendingRemoval{w: w, names: slices.Clone(resp.RemovedResources), next: nextFull}
		slices.Sort(held.names)
		resp.RemovedResources, nextFull = resp.RemovedResources[:0], nil
	}
	if len(resp.Resources) == 0 && len(resp.RemovedResources) == 0 && !always {
		if nextFull != nil {
			// The same state, but the new list: the old one would keep a superseded generation alive.
			c.mu.Lock()
			w.sent.whole(nextFull)
			c.mu.Unlock()
		}
		return held, nil // nothing changed for this client, or only removals, sent later
	}
	slices.Sort(resp.RemovedResources)
	resp.SystemVersionInfo, resp.Nonce = c.nextResponse(push)
	if err := c.send(resp, w.TypeURL); err != nil {
		return held, err
	}
	// Read before the sent set records the response: which parents are new, which follow-ups are due.
	fresh := len(c.srv.children[w.TypeURL]) > 0 && c.anyNew(w, resp.Resources)
	var followUps []string
	if w.policy.FollowUp != "" {
		followUps = c.followUps(w, resp.Resources)
	}
	if owed := c.owed[w.TypeURL]; owed != nil {
		for _, r := range resp.Resources {
			delete(owed, r.Name)
		}
	}
	c.recordDelta(w, resp, versions, nextFull)
	c.observeSent(w, resp.Nonce, push)
	return held, c.followDelta(w, push, resp.RemovedResources, fresh, followUps)
}

// deltaScan is what scanDelta found of a state against what the client has.
type deltaScan struct {
	known    int  // resources the client has as they are
	filtered bool // some were left out: not subscribed, or waiting for their parent
	inOrder  bool // sorted by name
}

// scanDelta appends to resp the resources of res the client does not have as they are, and their versions.
func (c *Connection) scanDelta(w *watch, resp *discovery.DeltaDiscoveryResponse, versions []string, res model.Resources,
	full bool) ([]string, deltaScan) {
	// A full state mostly repeats the last one sent, resource for resource: generators hand out the same
	// cached *Resource while its content stands, or rebuild it with the same version. Walking the previous
	// list alongside skips the per-name lookups for those (at 300 sidecars × 2,700 resources they were a
	// quarter of a service add's CPU). Only lists sent whole, with nothing held back, are walked
	// (sentSet.wholeList), so a resource found there is on the client as is.
	prev := w.sent.wholeList()
	if !full || !w.Wildcard {
		prev = nil
	}
	j := 0
	scan := deltaScan{inOrder: true}
	// A full state is kept as sent only if sorted by name (sentSet.whole). Two resources that follow each
	// other in prev, itself sorted, are in order: only the names around what changed are compared, not
	// 2,700 names per sidecar per push.
	last, lastAt := (*model.Resource)(nil), -1
	for _, r := range res {
		// r's index in prev when it is the very resource the client has. Found by pointer, so the thousands
		// of resources a push leaves as they are are not even read.
		at := -1
		if j < len(prev) && prev[j] == r {
			at, j = j, j+1
		} else if j+1 < len(prev) && prev[j+1] == r { // the one before was removed
			at, j = j+1, j+2
		}
		// Resources in prev were sent, so they are set and (prev being kept for wildcards only) subscribed.
		if at < 0 && (r == nil || r.Any == nil || !w.Subscribed(r.Name)) {
			scan.filtered = true
			continue
		}
		if scan.inOrder && last != nil && (at < 0 || at != lastAt+1) && last.Name >= r.Name {
			scan.inOrder = false
		}
		last, lastAt = r, at
		if at >= 0 {
			scan.known++
			continue
		}
		if j < len(prev) && prev[j].Name == r.Name {
			j++
			if resourceVersion(prev[j-1]) == resourceVersion(r) { // rebuilt, same bytes
				scan.known++
				continue
			}
		}
		if w.policy.Parent != "" && !c.parentSent(w.policy, r.Name) {
			scan.filtered = true
			continue // sent with its parent, later
		}
		v := resourceVersion(r)
		if have, ok := w.sent.get(r.Name); ok {
			scan.known++
			if have == v {
				continue
			}
		}
		resp.Resources = append(resp.Resources, r.DeltaResource(v))
		versions = append(versions, v)
	}
	return versions, scan
}

// deltaRemovals adds to resp the names the client has that the state no longer holds (a full state), or
// that removed names (a partial one), and the names just subscribed that do not exist, as the protocol asks.
func (c *Connection) deltaRemovals(w *watch, resp *discovery.DeltaDiscoveryResponse, res model.Resources, removed []string,
	added *nameset.Set, full bool, known int) {
	// seen is built only when needed: a full state that covers every name the client has removes nothing
	// (generators never repeat a name).
	var seen map[string]struct{}
	if added.Len() > 0 || (full && known < w.sent.len()) {
		seen = make(map[string]struct{}, len(res))
		for _, r := range res {
			if r != nil && r.Any != nil && w.Subscribed(r.Name) && (w.policy.Parent == "" || c.parentSent(w.policy, r.Name)) {
				seen[r.Name] = struct{}{}
			}
		}
	}
	if full && known < w.sent.len() {
		w.sent.names(func(n string) {
			if _, ok := seen[n]; !ok {
				resp.RemovedResources = append(resp.RemovedResources, n)
			}
		})
	}
	if !full {
		for _, n := range removed {
			if _, had := w.sent.get(n); had {
				resp.RemovedResources = append(resp.RemovedResources, n)
			}
		}
	}
	for _, n := range added.Sorted() {
		if _, ok := seen[n]; !ok {
			if _, had := w.sent.get(n); !had {
				resp.RemovedResources = append(resp.RemovedResources, n)
			}
		}
	}
}

// anyNew reports whether the client did not have one of resources.
func (c *Connection) anyNew(w *watch, resources []*discovery.Resource) bool {
	for _, r := range resources {
		if _, had := w.sent.get(r.Name); !had {
			return true
		}
	}
	return false
}

// recordDelta records what the client has after resp: nextFull itself when it got that whole state.
func (c *Connection) recordDelta(w *watch, resp *discovery.DeltaDiscoveryResponse, versions []string, nextFull model.Resources) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if nextFull != nil {
		w.sent.whole(nextFull)
	} else {
		if w.sent.len() == 0 && w.sent.list == nil {
			if !w.Wildcard && w.ResourceNames.Len() > 0 {
				w.sent = byPosition(w.ResourceNames)
			} else {
				// The initial state of a type: sized once rather than grown through every power of two.
				w.sent = sentSet{m: make(map[string]string, len(resp.Resources))}
			}
		}
		for i, r := range resp.Resources {
			w.sent.set(r.Name, versions[i])
		}
		for _, n := range resp.RemovedResources {
			w.sent.del(n)
		}
	}
	w.VersionSent, w.NonceSent, w.LastSent = resp.SystemVersionInfo, resp.Nonce, time.Now()
}

// followDelta sends what follows a response on the stream: the children of a parent the client did not
// have (it does not ask for them again when the parent arrives), and the follow-ups of updated resources.
func (c *Connection) followDelta(w *watch, push *model.PushContext, removed []string, fresh bool, followUps []string) error {
	if children := c.srv.children[w.TypeURL]; len(children) > 0 {
		c.forgetChildren(w.TypeURL, removed)
		if fresh {
			for _, t := range children {
				if cw := c.watched[t]; cw != nil {
					if err := c.respondDelta(cw.gen, cw, push, nil, nil, false); err != nil {
						return err
					}
				}
			}
		}
	}
	if len(followUps) > 0 {
		return c.resendFollowUps(w.policy.FollowUp, followUps, push)
	}
	return nil
}

// followUps returns the follow-ups (TypePolicy.FollowUp) of the resources of a response (sent, not yet
// recorded as sent) that the client subscribes to and has: it must be sent them again, as it does not ask
// again for a name it subscribes to already. Before the follow-up type's subscription exists on a resumed
// stream, the names are kept (owed): the client's first request for that type may claim versions it holds
// from before the update, and those must be sent all the same.
func (c *Connection) followUps(w *watch, sent []*discovery.Resource) []string {
	p := w.policy
	fw := c.watched[p.FollowUp]
	var out []string
	for _, r := range sent {
		name := p.FollowUpOf(r.Name)
		if fw == nil {
			if c.resumed {
				if c.owed == nil {
					c.owed = map[string]map[string]struct{}{}
				}
				if c.owed[p.FollowUp] == nil {
					c.owed[p.FollowUp] = map[string]struct{}{}
				}
				c.owed[p.FollowUp][name] = struct{}{}
			}
			continue
		}
		if fw.Subscribed(name) {
			if _, had := fw.sent.get(name); had {
				out = append(out, name)
			}
		}
	}
	return out
}

// resendFollowUps sends the named resources of typeURL, whatever the client has of them.
func (c *Connection) resendFollowUps(typeURL string, names []string, push *model.PushContext) error {
	fw := c.watched[typeURL]
	gen := c.srv.opts.Generators[typeURL]
	if fw == nil || gen == nil {
		return nil
	}
	c.mu.Lock()
	for _, n := range names {
		fw.sent.del(n)
	}
	c.mu.Unlock()
	return c.answerNames(gen, fw, push, nameset.New(names...))
}

// forgetOwed drops, from what a resumed client's first request for w's type says it has, the follow-ups
// owed since before that request: they must be sent.
func (c *Connection) forgetOwed(w *watch) {
	for n := range c.owed[w.TypeURL] {
		w.sent.del(n)
	}
	delete(c.owed, w.TypeURL)
}

// parentSent reports whether the parent (TypePolicy.Parent) of the resource name was sent on this
// connection (delta).
func (c *Connection) parentSent(p *model.TypePolicy, name string) bool {
	pw := c.watched[p.Parent]
	if pw == nil {
		return false
	}
	_, ok := pw.sent.get(p.ParentOf(name))
	return ok
}

// forgetChildren drops what was sent of the children of parents of parentType that the client no longer
// has: it dropped them with their parent, so they are sent again if it comes back.
func (c *Connection) forgetChildren(parentType string, parents []string) {
	if len(parents) == 0 {
		return
	}
	var gone map[string]bool
	for _, t := range c.srv.children[parentType] {
		cw := c.watched[t]
		if cw == nil {
			continue
		}
		if gone == nil {
			gone = make(map[string]bool, len(parents))
			for _, n := range parents {
				gone[n] = true
			}
		}
		var drop []string
		cw.sent.names(func(n string) {
			if gone[cw.policy.ParentOf(n)] {
				drop = append(drop, n)
			}
		})
		c.mu.Lock()
		for _, n := range drop {
			cw.sent.del(n)
		}
		c.mu.Unlock()
	}
}

// deltaScratch returns a response to fill and a list for its versions, reused from the connection's last
// send unless in use (a route configuration's send makes its virtual hosts' send within it). A response
// is done with once sent: gRPC has its bytes. Allocating one per push was an eighth of what endpoint churn
// allocated. Called under the turn.
func (c *Connection) deltaScratch() (*discovery.DeltaDiscoveryResponse, []string) {
	resp, versions := c.scratch.resp, c.scratch.versions
	if resp == nil {
		return &discovery.DeltaDiscoveryResponse{}, nil
	}
	c.scratch.resp, c.scratch.versions = nil, nil
	return resp, versions
}

// putDeltaScratch empties resp and versions and keeps them for the connection's next send. Lists grown by a
// full state (thousands of resources at a cold start) are dropped: 300 connections would keep them for good.
func (c *Connection) putDeltaScratch(resp *discovery.DeltaDiscoveryResponse, versions []string) {
	res, removed := keptScratch(resp.Resources), keptScratch(resp.RemovedResources)
	resp.Reset()
	resp.Resources, resp.RemovedResources = res, removed
	c.scratch.resp, c.scratch.versions = resp, keptScratch(versions)
}

// maxScratch is the longest list a connection keeps between sends: a push's response is a few resources.
const maxScratch = 64

// keptScratch returns list emptied for reuse (cleared, so it keeps nothing alive), or nil if it is long.
func keptScratch[T any](list []T) []T {
	if cap(list) > maxScratch {
		return nil
	}
	clear(list)
	return list[:0]
}
