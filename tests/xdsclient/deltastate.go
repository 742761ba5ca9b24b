package xdsclient

import (
	"maps"
	"slices"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
)

// wildcard is the explicit wildcard subscription name.
const wildcard = "*"

// requested is the state of an explicitly requested name: a version once the server sent it, or waiting.
type requested struct {
	version string
	waiting bool
	since   time.Time // when the subscription that waits was sent
}

// deltaState is Envoy's per-type delta subscription state (delta_subscription_state.cc): what was asked
// for, what came from the wildcard, what became ambiguous, and what the next request must say.
type deltaState struct {
	typeURL string
	// requestedNames are the names asked for explicitly ("*" among them once the wildcard is asked for).
	requestedNames map[string]*requested
	// fromWildcard are resources the server sent under the wildcard, name → version.
	fromWildcard map[string]string
	// ambiguous are names unsubscribed while the wildcard was on: Envoy cannot tell whether the wildcard
	// still covers them and waits for the server to say (resend or remove).
	ambiguous map[string]time.Time
	// ambiguousVersion keeps their versions, for initial_resource_versions.
	ambiguousVersion map[string]string

	added, removed map[string]bool
	// legacy is in_initial_legacy_wildcard_: no explicit name was ever asked for, so an empty first request
	// means "everything".
	legacy bool
	// sentOnStream is any_request_sent_yet_in_current_stream_.
	sentOnStream bool
	// initialVersions is should_send_initial_resource_versions_ (on a reconnect).
	initialVersions bool
	// firstSent is when the stream's first request went out, while no response has come (zero: answered).
	firstSent time.Time
}

func newDeltaState(typeURL string) *deltaState {
	return &deltaState{typeURL: typeURL, requestedNames: map[string]*requested{}, fromWildcard: map[string]string{},
		ambiguous: map[string]time.Time{}, ambiguousVersion: map[string]string{}, added: map[string]bool{},
		removed: map[string]bool{}, legacy: true}
}

// updateInterest applies a change of the watches' names (updateSubscriptionInterest).
func (s *deltaState) updateInterest(add, remove []string) {
	for _, a := range add {
		if a != wildcard {
			s.legacy = false
		}
		switch {
		case s.fromWildcard[a] != "":
			s.requestedNames[a] = &requested{version: s.fromWildcard[a]}
			delete(s.fromWildcard, a)
		case !s.ambiguous[a].IsZero():
			s.requestedNames[a] = &requested{version: s.ambiguousVersion[a]}
			delete(s.ambiguous, a)
			delete(s.ambiguousVersion, a)
		default:
			s.requestedNames[a] = &requested{waiting: true}
		}
		delete(s.removed, a)
		s.added[a] = true
	}
	for _, r := range remove {
		erased := false
		if _, star := s.requestedNames[wildcard]; star {
			if st, ok := s.requestedNames[r]; ok {
				// It may still come from the wildcard: keep it and let the server say.
				if !st.waiting {
					s.ambiguous[r] = time.Now()
					s.ambiguousVersion[r] = st.version
				}
				delete(s.requestedNames, r)
				erased = true
			}
		} else if _, ok := s.requestedNames[r]; ok {
			delete(s.requestedNames, r)
			erased = true
		}
		delete(s.added, r)
		if erased {
			s.removed[r] = true
			s.legacy = false
		}
	}
	if slices.Contains(remove, wildcard) {
		clear(s.fromWildcard)
		clear(s.ambiguous)
		clear(s.ambiguousVersion)
	}
}

// pending reports whether a request must be sent (subscriptionUpdatePending).
func (s *deltaState) pending() bool {
	if len(s.added) > 0 || len(s.removed) > 0 {
		return true
	}
	if !s.sentOnStream {
		return len(s.requestedNames) > 0 || s.legacy
	}
	return false
}

// streamFresh starts a new stream: the next request restates everything.
func (s *deltaState) streamFresh(initialVersions bool) {
	s.sentOnStream, s.initialVersions = false, initialVersions
}

// next builds the next request (getNextRequestAckless), with the ACK or NACK of nonce when given.
func (s *deltaState) next(nonce string, nack *rpcstatus.Status) *discovery.DeltaDiscoveryRequest {
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: s.typeURL, ResponseNonce: nonce, ErrorDetail: nack}
	now := time.Now()
	if !s.sentOnStream {
		s.sentOnStream = true
		legacy := s.legacyRequest()
		versions := map[string]string{}
		for n, st := range s.requestedNames {
			if s.initialVersions && !st.waiting && n != wildcard {
				versions[n] = st.version
			}
			s.added[n] = true
		}
		if s.initialVersions {
			maps.Copy(versions, s.fromWildcard)
			maps.Copy(versions, s.ambiguousVersion)
		}
		if len(versions) > 0 {
			req.InitialResourceVersions = versions
		}
		if legacy {
			clear(s.added)
		}
		clear(s.removed)
		s.firstSent = now
	}
	req.ResourceNamesSubscribe = slices.Sorted(maps.Keys(s.added))
	req.ResourceNamesUnsubscribe = slices.Sorted(maps.Keys(s.removed))
	for _, n := range req.ResourceNamesSubscribe {
		if st := s.requestedNames[n]; st != nil && st.waiting {
			st.since = now
		}
	}
	clear(s.added)
	clear(s.removed)
	return req
}

// legacyRequest reports whether the first request on a stream is a legacy wildcard (no names), and records
// the wildcard as requested when so (isInitialRequestForLegacyWildcard).
func (s *deltaState) legacyRequest() bool {
	if s.legacy {
		s.requestedNames[wildcard] = &requested{waiting: true}
		return true
	}
	if len(s.added) > 0 || len(s.removed) > 0 {
		return false
	}
	_, star := s.requestedNames[wildcard]
	return star && len(s.requestedNames) == 1
}

// accepted records the versions of an accepted response (handleGoodResponse, after the watches took it).
func (s *deltaState) accepted(resp *discovery.DeltaDiscoveryResponse) {
	s.firstSent = time.Time{}
	if st := s.requestedNames[wildcard]; st != nil {
		st.waiting = false
	}
	_, star := s.requestedNames[wildcard]
	for _, r := range resp.GetResources() {
		if st := s.requestedNames[r.GetName()]; st != nil {
			st.version, st.waiting = r.GetVersion(), false
		} else if star {
			s.fromWildcard[r.GetName()] = r.GetVersion()
			delete(s.ambiguous, r.GetName())
			delete(s.ambiguousVersion, r.GetName())
		}
	}
	for _, n := range resp.GetRemovedResources() {
		if st := s.requestedNames[n]; st != nil {
			st.version, st.waiting = "", true
			st.since = time.Time{} // answered: it does not exist
		} else if _, ok := s.ambiguous[n]; ok {
			delete(s.ambiguous, n)
			delete(s.ambiguousVersion, n)
		} else {
			delete(s.fromWildcard, n)
		}
	}
}

// answered is called for every response, accepted or not: what it names is no longer waiting for the server.
func (s *deltaState) answered(resp *discovery.DeltaDiscoveryResponse) {
	s.firstSent = time.Time{}
	for _, r := range resp.GetResources() {
		if st := s.requestedNames[r.GetName()]; st != nil {
			st.since = time.Time{}
		}
	}
	for _, n := range resp.GetRemovedResources() {
		if st := s.requestedNames[n]; st != nil {
			st.since = time.Time{}
		}
	}
}

// unanswered lists, for names subscribed and still waiting on this stream, how long they have waited; and
// the ambiguous names the server said nothing about.
func (s *deltaState) unanswered(now time.Time, older time.Duration) []string {
	var out []string
	if !s.firstSent.IsZero() && now.Sub(s.firstSent) > older {
		out = append(out, s.typeURL+": first request on the stream not answered")
	}
	for _, n := range slices.Sorted(maps.Keys(s.requestedNames)) {
		st := s.requestedNames[n]
		if st.waiting && !st.since.IsZero() && now.Sub(st.since) > older {
			out = append(out, s.typeURL+": subscribed "+n+", neither sent nor removed")
		}
	}
	for _, n := range slices.Sorted(maps.Keys(s.ambiguous)) {
		if now.Sub(s.ambiguous[n]) > older {
			out = append(out, s.typeURL+": unsubscribed "+n+" while \"*\" is on, and the server said nothing of it")
		}
	}
	return out
}
