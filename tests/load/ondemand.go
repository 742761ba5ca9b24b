package main

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/sextantmesh/sextant/api/workload"
)

// ztunnelOnDemand runs one ztunnel in on-demand mode, as istio/ztunnel's src/xds/client.rs has it: its
// first Address request subscribes "*" and unsubscribes "*" in the same message ("subscribe to nothing"),
// Authorization is a plain wildcard; each address it does not know is then looked up on its own, a request
// subscribing the one name NETWORK/IP (the mesh's network is empty here: "/IP"), answered by the resource
// or by the name in removed_resources. ztunnel forgets a name the server removed, and subscribes to it again
// on the next connection to that address: the lookups go over -ondemand-names addresses outside the mesh
// again and again until -ondemand-lookups are made, plus a few pod IPs that must return their workload.
// One client on gRPC-Go's own stream: its CPU does not matter here.
func (h *harness) ztunnelOnDemand() (*Result, error) {
	lookups, distinct := h.cfg.OnDemandLookups, max(1, h.cfg.OnDemandNames)
	if lookups <= 0 {
		return nil, nil
	}
	h.extraSeq++
	node := newProxy(h, 300000+h.extraSeq, kindZtunnel, "istio-system", "ztunnel", fmt.Sprintf("ztunnel-ondemand-%d", h.extraSeq),
		fmt.Sprintf("192.168.254.%d", h.extraSeq%250+1), nil).node
	cc, err := grpc.NewClient("passthrough:///"+h.srv.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	z := &onDemandClient{stream: stream, pending: map[string]*lookup{}, over: make(chan struct{}), firstOf: map[string]chan struct{}{
		addrType: make(chan struct{}), authzType: make(chan struct{})}}
	h.quiet(h.cfg.Quiet, 5*time.Second)
	st0, fleet0 := h.srv.stats(), procCPUSeconds("self", h.srv.clkTck)
	for _, req := range []*discovery.DeltaDiscoveryRequest{
		{TypeUrl: addrType, Node: node, ResourceNamesSubscribe: []string{"*"}, ResourceNamesUnsubscribe: []string{"*"}},
		{TypeUrl: authzType, Node: node},
	} {
		if err := z.send(req); err != nil {
			return nil, err
		}
	}
	firsts := map[string]chan struct{}{}
	for t, ch := range z.firstOf {
		firsts[t] = ch // run deletes from firstOf
	}
	go z.run()
	for t, ch := range firsts {
		select {
		case <-ch:
		case <-time.After(h.cfg.Timeout):
			return nil, fmt.Errorf("ztunnel on demand: no first %s response in %s", shortType[t], h.cfg.Timeout)
		case <-z.done():
			return nil, fmt.Errorf("ztunnel on demand: %w", z.failed())
		}
	}
	h.quiet(2*h.cfg.Quiet, 5*time.Second)
	z.mu.Lock()
	initialAddrs, initialBytes := z.addresses, z.addrBytes
	bytes0 := z.bytes
	z.mu.Unlock()

	// Existing pods: one from each of the first services.
	var existing []string
	for _, s := range h.mesh.svcs[:min(10, len(h.mesh.svcs))] {
		if len(s.pods) > 0 {
			existing = append(existing, s.pods[0].ip)
		}
	}
	unknown := make([]string, distinct)
	for i := range unknown {
		unknown[i] = fmt.Sprintf("198.18.%d.%d", i/250, i%250+1) // the benchmarking range: never a pod or a VIP
	}
	var all []*lookup
	timeout := h.cfg.OnDemandTimeout
	interval := time.Second / time.Duration(max(1, h.cfg.OnDemandRate))
	// Passes over the unknown addresses; a lookup of a name is repeated only once the previous one is over,
	// as ztunnel's own would be.
	for pass, made := 0, 0; made < lookups; pass++ {
		var batch []*lookup
		if pass == 0 {
			for _, ip := range existing {
				batch = append(batch, &lookup{name: "/" + ip, ip: ip, existing: true})
			}
		}
		for _, ip := range unknown {
			if made == lookups {
				break
			}
			batch = append(batch, &lookup{name: "/" + ip, ip: ip, repeat: pass > 0})
			made++
		}
		tick := time.NewTicker(interval)
		for _, l := range batch {
			<-tick.C
			if err := z.lookup(l); err != nil {
				tick.Stop()
				return nil, err
			}
		}
		tick.Stop()
		deadline := time.Now().Add(timeout)
		for time.Now().Before(deadline) && !z.answeredAll(batch) {
			time.Sleep(5 * time.Millisecond)
		}
		z.forget(batch)
		all = append(all, batch...)
		if z.failed() != nil {
			return nil, fmt.Errorf("ztunnel on demand: %w", z.failed())
		}
	}
	h.quiet(h.cfg.Quiet, 5*time.Second)
	st1 := h.srv.stats()
	z.mu.Lock()
	bytes := z.bytes - bytes0
	byType := map[string]int64{}
	for t, n := range z.byType {
		byType[shortType[t]] = n
	}
	z.mu.Unlock()

	var lats []time.Duration
	fig := map[string]float64{"initialAddresses": float64(initialAddrs), "initialAddressBytes": float64(initialBytes),
		"lookupsOutsideMesh": 0, "answeredFirst": 0, "unansweredFirst": 0, "answeredRepeat": 0, "unansweredRepeat": 0,
		"existingLookups": float64(len(existing)), "existingFound": 0, "existingWrong": 0, "existingUnanswered": 0}
	missed := 0
	for _, l := range all {
		if l.answered.IsZero() {
			missed++
		} else {
			lats = append(lats, l.answered.Sub(l.sent))
		}
		switch {
		case l.existing && l.answered.IsZero():
			fig["existingUnanswered"]++
		case l.existing && l.found:
			fig["existingFound"]++
		case l.existing:
			fig["existingWrong"]++
		case l.repeat && l.answered.IsZero():
			fig["lookupsOutsideMesh"]++
			fig["unansweredRepeat"]++
		case l.repeat:
			fig["lookupsOutsideMesh"]++
			fig["answeredRepeat"]++
		case l.answered.IsZero():
			fig["lookupsOutsideMesh"]++
			fig["unansweredFirst"]++
		default:
			fig["lookupsOutsideMesh"]++
			fig["answeredFirst"]++
		}
	}
	r := h.summarize("ztunnel-on-demand", []sample{{lats: lats, missed: missed, interest: 1, bytes: bytes,
		cpu: st1.CPUSeconds - st0.CPUSeconds, fleetCPU: procCPUSeconds("self", h.srv.clkTck) - fleet0, byType: byType}})
	n := float64(len(all))
	r.Changes = len(all)
	r.BytesPerChange, r.CPUPerChange, r.FleetCPUPerChange = float64(bytes)/n, r.CPUPerChange/n, r.FleetCPUPerChange/n
	for k, v := range r.BytesByType {
		r.BytesByType[k] = v / n
	}
	r.ResponsesPerChange = float64(z.lookupResponses()) / n
	r.Figures = fig
	r.Note = fmt.Sprintf("1 on-demand ztunnel; its first Address response held %d addresses (%s; want none); %d lookups of %d addresses "+
		"outside the mesh (first time: %.0f answered, %.0f not; again: %.0f answered, %.0f not) and %d of pod IPs (%.0f returned the "+
		"workload); latency over lookups answered, missed: not answered within %s; per-change figures per lookup",
		initialAddrs, mb(float64(initialBytes)), int(fig["lookupsOutsideMesh"]), distinct, fig["answeredFirst"], fig["unansweredFirst"],
		fig["answeredRepeat"], fig["unansweredRepeat"], len(existing), fig["existingFound"], timeout)
	return r, nil
}

type lookup struct {
	name, ip         string
	existing, repeat bool
	sent, answered   time.Time
	found            bool // answered with a resource (for existing: the workload at ip)
}

// onDemandClient is the on-demand ztunnel's stream: one goroutine receives and ACKs, the scenario sends
// lookups.
type onDemandClient struct {
	stream grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
	sendMu sync.Mutex

	mu        sync.Mutex
	pending   map[string]*lookup
	firstOf   map[string]chan struct{}
	addresses int   // Address resources received
	addrBytes int64 // in Address responses
	bytes     int64
	byType    map[string]int64
	responses int64 // after the first lookup
	looking   bool
	err       error
	over      chan struct{} // closed when the stream has ended
}

func (z *onDemandClient) send(req *discovery.DeltaDiscoveryRequest) error {
	z.sendMu.Lock()
	defer z.sendMu.Unlock()
	return z.stream.Send(req)
}

func (z *onDemandClient) done() <-chan struct{} { return z.over }

func (z *onDemandClient) failed() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.err
}

func (z *onDemandClient) run() {
	over := z.over
	for {
		resp, err := z.stream.Recv()
		if err != nil {
			z.mu.Lock()
			z.err = err
			z.mu.Unlock()
			close(over)
			return
		}
		now := time.Now()
		z.mu.Lock()
		if z.byType == nil {
			z.byType = map[string]int64{}
		}
		size := int64(proto.Size(resp))
		z.bytes += size
		if z.looking {
			z.byType[resp.TypeUrl] += size
			z.responses++
		}
		if ch, ok := z.firstOf[resp.TypeUrl]; ok {
			close(ch)
			delete(z.firstOf, resp.TypeUrl)
		}
		if resp.TypeUrl == addrType {
			z.addresses += len(resp.Resources)
			z.addrBytes += size
			for _, r := range resp.Resources {
				if l := z.pending[r.Name]; l != nil && l.answered.IsZero() {
					l.answered, l.found = now, !l.existing || holdsWorkload(r.GetResource().GetValue(), l.ip)
				}
			}
			for _, n := range resp.RemovedResources {
				if l := z.pending[n]; l != nil && l.answered.IsZero() {
					l.answered = now
				}
			}
		}
		z.mu.Unlock()
		if err := z.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce}); err != nil {
			z.mu.Lock()
			z.err = err
			z.mu.Unlock()
			close(over)
			return
		}
	}
}

// lookup sends one on-demand request, as ztunnel's handle_demand_event does.
func (z *onDemandClient) lookup(l *lookup) error {
	z.mu.Lock()
	z.looking = true
	l.sent = time.Now()
	z.pending[l.name] = l
	z.mu.Unlock()
	return z.send(&discovery.DeltaDiscoveryRequest{TypeUrl: addrType, ResourceNamesSubscribe: []string{l.name}})
}

func (z *onDemandClient) answeredAll(ls []*lookup) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, l := range ls {
		if l.answered.IsZero() {
			return false
		}
	}
	return true
}

// forget ends a pass: a late answer no longer counts.
func (z *onDemandClient) forget(ls []*lookup) {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, l := range ls {
		if z.pending[l.name] == l {
			delete(z.pending, l.name)
		}
	}
}

func (z *onDemandClient) lookupResponses() int64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.responses
}

// holdsWorkload reports whether an istio.workload.Address is a workload with address ip.
func holdsWorkload(b []byte, ip string) bool {
	var a workload.Address
	if proto.Unmarshal(b, &a) != nil {
		return false
	}
	want, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	for _, raw := range a.GetWorkload().GetAddresses() {
		if got, ok := netip.AddrFromSlice(raw); ok && got.Unmap() == want {
			return true
		}
	}
	return false
}
