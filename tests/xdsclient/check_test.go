package xdsclient

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// testFetchTimeout is initial_fetch_timeout in the tests: short, so a wait the server leaves unanswered
// ends (and is recorded) within a test.
const testFetchTimeout = 3 * time.Second

// quiet is how long nothing may happen before the clients count as settled: longer than the server's file
// settle and debounce (20 ms, then at most 200 ms).
const quiet = 400 * time.Millisecond

// settled waits until the server's snapshot and every client have been quiet for quiet, no Envoy warms and
// nothing is unanswered; it gives up after within (the checks then say what is wrong).
func settled(s *server, envoys []*Envoy, ztunnels []*Ztunnel, within time.Duration) bool {
	version, since := s.snapshotVersion(), time.Now()
	return waitFor(within, func() bool {
		if v := s.snapshotVersion(); v != version {
			version, since = v, time.Now()
		}
		if time.Since(since) < quiet {
			return false
		}
		for _, e := range envoys {
			if _, _, last := e.Stats(); time.Since(last) < quiet || len(e.Warming()) > 0 || len(e.Unanswered(0)) > 0 {
				return false
			}
		}
		for _, z := range ztunnels {
			if _, _, last := z.Stats(); time.Since(last) < quiet || len(z.Unanswered(0)) > 0 {
				return false
			}
		}
		return true
	})
}

// checkEnvoy returns how e differs from where it should be: what it holds against what the server
// generates for it now, its subscriptions against the server's view of them, and any timeout, unanswered
// request, protocol error or re-send after a NACK.
func checkEnvoy(s *server, e *Envoy) []string {
	var out []string
	for _, to := range e.Timeouts() {
		out = append(out, fmt.Sprintf("%s warmed only by initial_fetch_timeout (%v): nothing came for %s %s",
			to.What, to.Waited.Round(time.Millisecond), short(to.TypeURL), to.Name))
	}
	for _, w := range e.Warming() {
		out = append(out, "still warming: "+w)
	}
	for _, u := range e.Unanswered(quiet) {
		out = append(out, "unanswered: "+u)
	}
	out = append(out, s.nackLoops(e.ResentAfterNACK())...)
	out = append(out, e.Errors()...)
	gen, err := s.generated(e.NodeID())
	if err != nil {
		return append(out, err.Error())
	}
	subs, err := s.subscriptions(e.NodeID())
	if err != nil {
		return append(out, err.Error())
	}
	rejected := e.Rejected()
	routes := e.Held(RouteType)
	for _, t := range e.Types() {
		want, ok := gen[t]
		if !ok {
			out = append(out, fmt.Sprintf("%s: subscribed, but the server has no subscription for it", short(t)))
			continue
		}
		if t == VirtualHostType {
			// Envoy keeps only the virtual hosts of route configurations it holds.
			want = slices.DeleteFunc(slices.Clone(want), func(a anyRes) bool { _, ok := routes[routeConfigOf(nameOf(a))]; return !ok })
		}
		out = append(out, diffHeld(t, e.Held(t), want, skipOf(rejected, t))...)
		names, wildcard := e.Subscribed(t)
		if sv := subs[t]; sv.Wildcard != wildcard || !slices.Equal(sv.Names, names) {
			out = append(out, fmt.Sprintf("%s: the server sees the subscription as wildcard=%v %v, the client asked for wildcard=%v %v",
				short(t), sv.Wildcard, sv.Names, wildcard, names))
		}
	}
	return out
}

// checkZtunnel is checkEnvoy for a ztunnel.
func checkZtunnel(s *server, z *Ztunnel) []string {
	var out []string
	for _, u := range z.Unanswered(quiet) {
		out = append(out, "unanswered: "+u)
	}
	out = append(out, s.nackLoops(z.ResentAfterNACK())...)
	gen, err := s.generated(z.NodeID())
	if err != nil {
		return append(out, err.Error())
	}
	subs, err := s.subscriptions(z.NodeID())
	if err != nil {
		return append(out, err.Error())
	}
	rejected := z.Rejected()
	for _, t := range []string{AddressType, AuthorizationType} {
		want, ok := gen[t]
		if !ok {
			out = append(out, fmt.Sprintf("%s: subscribed, but the server has no subscription for it", short(t)))
			continue
		}
		if !z.OnDemand() || t != AddressType {
			out = append(out, diffHeld(t, z.Held(t), want, skipOf(rejected, t))...)
			continue
		}
		// On demand: the subscription is the names looked up on this stream (ztunnel does not ask again for
		// earlier ones after a reconnect; what it kept of them is not checked).
		looked := z.LookedUp()
		if sv := subs[t]; sv.Wildcard || !slices.Equal(sv.Names, looked) {
			out = append(out, fmt.Sprintf("%s: the server sees the on-demand subscription as wildcard=%v %v, the lookups were %v",
				short(t), sv.Wildcard, sv.Names, looked))
			if sv.Wildcard {
				want = nil // what an on-demand ztunnel should hold is its lookups, not everything
			}
		}
		held := z.Held(t)
		for n := range held {
			if z.lookedUpBefore(n) && !slices.Contains(looked, n) {
				delete(held, n)
			}
		}
		if want == nil {
			for _, n := range looked {
				if h, ok := held[n]; ok {
					want = append(want, h.Any) // cannot be told apart here; the subscription error says it
				}
			}
		}
		out = append(out, diffContents(short(t), held, want)...)
	}
	return out
}

// nackLoops reports the re-sends after a NACK that no push explains: the server answered the NACK by
// sending the same thing again. A push that started shortly before the NACK may still be on its way (its
// response can repeat the rejected one), so it explains a re-send too; a loop re-sends after every NACK
// and is caught at the next round.
func (s *server) nackLoops(resends []Resend) []string {
	const inFlight = 100 * time.Millisecond
	var out []string
	for _, r := range resends {
		if !s.pushedBetween(r.Rejected.Add(-inFlight), r.Resent) {
			out = append(out, fmt.Sprintf("NACK loop: %s %s sent again unchanged %v after it was rejected, with no push in between",
				short(r.TypeURL), r.Name, r.Resent.Sub(r.Rejected).Round(time.Millisecond)))
		}
	}
	return out
}

func short(typeURL string) string {
	for i := len(typeURL) - 1; i >= 0; i-- {
		if typeURL[i] == '.' {
			return typeURL[i+1:]
		}
	}
	return typeURL
}

func report(t *testing.T, who string, problems []string) {
	t.Helper()
	for _, p := range problems {
		t.Errorf("%s: %s", who, p)
	}
}
