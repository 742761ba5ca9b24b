package autoregister

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pilot/xds"
)

// DefaultGracePeriod is how long a registered entry outlives its agent's last connection, as istiod's
// PILOT_WORKLOAD_ENTRY_GRACE_PERIOD: an agent that reconnects (to any replica) within it keeps its entry.
const DefaultGracePeriod = 10 * time.Second

// writeTimeout bounds each write of an entry; a connection waits for its registration.
const writeTimeout = 10 * time.Second

// Options configure a Controller.
type Options struct {
	// Store is where WorkloadGroups (and, for the periodic sweep, registered entries) are read.
	Store *store.Store
	// Entries is where entries are written: NewKubeEntries with a cluster, else NewStoreEntries(Store).
	Entries Entries
	// Instance names this replica in the entries it controls (istio.io/workloadController); unique per replica.
	Instance string
	// GracePeriod is how long after its agent's last connection ended an entry is deleted (DefaultGracePeriod).
	GracePeriod time.Duration
	// MaxConnectionAge is the transport's (zero: none). An entry still marked connected 1.5 times that long
	// after its connection began lost its disconnection (its replica died with it) and is deleted.
	MaxConnectionAge time.Duration
	Logger           *slog.Logger
}

// Controller registers connecting VMs. It is the transport's xds.ConnectionHook.
type Controller struct {
	opts Options
	log  *slog.Logger

	mu    sync.Mutex
	conns map[proxyKey]map[string]struct{} // connection ids of each registered proxy

	base context.Context // cancelled when Run ends
	stop context.CancelFunc
	wg   sync.WaitGroup // disconnections and cleanups in flight
}

var _ xds.ConnectionHook = (*Controller)(nil)

// proxyKey is one registered workload: connections with the same key share its entry.
type proxyKey struct {
	network, ip, group, namespace string
}

func keyOf(p *model.Proxy) proxyKey {
	return proxyKey{network: p.Network, ip: p.IPAddresses[0], group: p.AutoRegisterGroup, namespace: p.Namespace}
}

// New returns a controller; Run does its cleanups.
func New(opts Options) *Controller {
	if opts.GracePeriod <= 0 {
		opts.GracePeriod = DefaultGracePeriod
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Controller{opts: opts, log: opts.Logger, conns: map[proxyKey]map[string]struct{}{}}
	c.base, c.stop = context.WithCancel(context.Background())
	return c
}

// Connected registers the proxy of a connection that names a WorkloadGroup, or refuses the connection
// with the reason: a group that does not exist, no verified identity, or one the entry does not allow.
func (c *Controller) Connected(ev xds.ConnectionEvent) error {
	p := ev.Proxy
	if p.AutoRegisterGroup == "" {
		return nil
	}
	name, err := entryName(p)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	groupKey := config.Key{Kind: config.WorkloadGroup, Namespace: p.Namespace, Name: p.AutoRegisterGroup}
	group := c.opts.Store.Get(groupKey)
	if group == nil {
		return status.Errorf(codes.FailedPrecondition, "auto-registration of %s failed: cannot find WorkloadGroup %s", p,
			groupKey.NamespacedName())
	}
	ctx, cancel := context.WithTimeout(c.base, writeTimeout)
	defer cancel()
	key := config.Key{Kind: config.WorkloadEntry, Namespace: p.Namespace, Name: name}
	for attempt := 0; ; attempt++ {
		err = c.register(ctx, key, p, group, ev.ConnectedAt)
		if !errors.Is(err, ErrConflict) && !errors.Is(err, ErrExists) || attempt == 3 {
			break
		}
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	k := keyOf(p)
	if c.conns[k] == nil {
		c.conns[k] = map[string]struct{}{}
	}
	c.conns[k][ev.ID] = struct{}{}
	c.mu.Unlock()
	return nil
}

// register creates the entry of p from group, or marks the one there connected to this replica.
func (c *Controller) register(ctx context.Context, key config.Key, p *model.Proxy, group *config.Config, at time.Time) error {
	cur, err := c.opts.Entries.Get(ctx, key)
	if err != nil {
		return status.Errorf(codes.Unavailable, "auto-registration of %s: reading WorkloadEntry %s: %v", p, key.NamespacedName(), err)
	}
	if cur == nil {
		e := entryFromGroup(key.Name, p, group)
		if err := checkIdentity(p, e); err != nil {
			return status.Error(codes.PermissionDenied, err.Error())
		}
		if err := c.opts.Entries.Create(ctx, withConnection(e, c.opts.Instance, at), group); err != nil {
			return c.writeErr(err, p, key, "creating")
		}
		// With health checks, the entry is served once the agent reports its workload ready (Report).
		c.log.Info("auto-registered WorkloadEntry", "entry", key.NamespacedName(), "proxy", p.String(),
			"healthChecks", e.Annotations[AnnotationHealthChecks] != "")
		return nil
	}
	if err := checkIdentity(p, cur); err != nil {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	// A disconnection or a newer connection (to any replica) written after this one began wins, as in istiod.
	if at.Before(annotationTime(cur, AnnotationDisconnectedAt)) || at.Before(annotationTime(cur, AnnotationConnectedAt)) {
		return nil
	}
	if cur.Annotations[AnnotationController] == c.opts.Instance && !at.After(annotationTime(cur, AnnotationConnectedAt)) {
		return nil
	}
	if err := c.opts.Entries.Update(ctx, withConnection(cur, c.opts.Instance, at)); err != nil {
		return c.writeErr(err, p, key, "updating")
	}
	c.log.Info("WorkloadEntry marked connected", "entry", key.NamespacedName(), "proxy", p.String())
	return nil
}

func (c *Controller) writeErr(err error, p *model.Proxy, key config.Key, what string) error {
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrExists) {
		return err
	}
	return status.Errorf(codes.Unavailable, "auto-registration of %s: %s WorkloadEntry %s: %v", p, what, key.NamespacedName(), err)
}

// Disconnected marks the entry of the proxy disconnected once its last connection to this replica has
// ended, and deletes it after the grace period unless the agent has reconnected meanwhile.
func (c *Controller) Disconnected(ev xds.ConnectionEvent) {
	p := ev.Proxy
	if p.AutoRegisterGroup == "" || len(p.IPAddresses) == 0 {
		return
	}
	k := keyOf(p)
	c.mu.Lock()
	_, ok := c.conns[k][ev.ID]
	delete(c.conns[k], ev.ID)
	remaining := len(c.conns[k])
	if remaining == 0 {
		delete(c.conns, k)
	}
	c.mu.Unlock()
	if !ok || remaining > 0 {
		return
	}
	name, _ := entryName(p)
	key := config.Key{Kind: config.WorkloadEntry, Namespace: p.Namespace, Name: name}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.unregister(key, ev.ConnectedAt, time.Now())
	}()
}

// unregister marks key disconnected at at, retrying as istiod does while the entry is not found or changes
// under it, then deletes it after the grace period if it is still disconnected then.
func (c *Controller) unregister(key config.Key, connectedAt, at time.Time) {
	delay := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		done, err := c.markDisconnected(key, connectedAt, at)
		if err == nil {
			if done {
				c.cleanupAfter(key, c.opts.GracePeriod)
			}
			return
		}
		if attempt == 5 {
			c.log.Warn("could not mark the auto-registered WorkloadEntry disconnected; the periodic sweep deletes it",
				"entry", key.NamespacedName(), "error", err)
			return
		}
		select {
		case <-time.After(delay):
			delay *= 2
		case <-c.base.Done():
			return
		}
	}
}

// markDisconnected writes the disconnection; done is false when a later connection owns the entry.
func (c *Controller) markDisconnected(key config.Key, connectedAt, at time.Time) (done bool, err error) {
	ctx, cancel := context.WithTimeout(c.base, writeTimeout)
	defer cancel()
	cur, err := c.opts.Entries.Get(ctx, key)
	if err != nil {
		return false, err
	}
	if cur == nil {
		return false, fmt.Errorf("WorkloadEntry %s not found", key.NamespacedName())
	}
	if annotationTime(cur, AnnotationConnectedAt).After(connectedAt) || cur.Annotations[AnnotationController] != c.opts.Instance ||
		at.Before(annotationTime(cur, AnnotationConnectedAt)) {
		return false, nil
	}
	if err := c.opts.Entries.Update(ctx, withDisconnection(cur, at)); err != nil {
		return false, err
	}
	c.log.Info("auto-registered WorkloadEntry marked disconnected", "entry", key.NamespacedName(), "deleteAfter", c.opts.GracePeriod)
	return true, nil
}

// cleanupAfter deletes key after d if it is still to be cleaned up then.
func (c *Controller) cleanupAfter(key config.Key, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.base.Done():
		return
	}
	ctx, cancel := context.WithTimeout(c.base, writeTimeout)
	defer cancel()
	cur, err := c.opts.Entries.Get(ctx, key)
	if err != nil || cur == nil {
		return
	}
	c.cleanup(ctx, cur)
}

// cleanup deletes e if it is an auto-registered entry whose agent has been gone past the grace period.
func (c *Controller) cleanup(ctx context.Context, e *config.Config) {
	if !c.stale(e, time.Now()) {
		return
	}
	if err := c.opts.Entries.Delete(ctx, e.Key, e.ResourceVersion); err != nil {
		c.log.Warn("could not delete the auto-registered WorkloadEntry", "entry", e.NamespacedName(), "error", err)
		return
	}
	c.log.Info("auto-registered WorkloadEntry deleted: its agent has gone", "entry", e.NamespacedName())
}

// stale is istiod's shouldCleanupEntry for auto-registered entries: disconnected longer than the grace
// period, or marked connected for longer than a connection may last.
func (c *Controller) stale(e *config.Config, now time.Time) bool {
	if e.Annotations[AnnotationGroup] == "" {
		return false
	}
	if _, ok := e.Spec.(*networking.WorkloadEntry); !ok {
		return false
	}
	if e.Annotations[AnnotationConnectedAt] != "" {
		at := annotationTime(e, AnnotationConnectedAt)
		return c.opts.MaxConnectionAge > 0 && !at.IsZero() && now.Sub(at) > c.opts.MaxConnectionAge+c.opts.MaxConnectionAge/2
	}
	if e.Annotations[AnnotationDisconnectedAt] == "" {
		return false
	}
	at := annotationTime(e, AnnotationDisconnectedAt)
	return at.IsZero() || now.Sub(at) >= c.opts.GracePeriod
}

// Run sweeps the entries every ten grace periods, as istiod, for those whose disconnection or deletion was
// lost (a replica that stopped meanwhile), until ctx ends; then it stops the work in flight and waits for it.
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTicker(10 * c.opts.GracePeriod)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.sweep()
		case <-ctx.Done():
			c.stop()
			c.wg.Wait()
			return
		}
	}
}

// sweep deletes the stale entries this controller may have written: from the cluster or its own layer,
// never a user's file.
func (c *Controller) sweep() {
	for _, e := range c.opts.Store.ListUnsorted(config.WorkloadEntry) {
		if (e.Source == config.KubeSource || e.Source == SourceName) && c.stale(e, time.Now()) {
			ctx, cancel := context.WithTimeout(c.base, writeTimeout)
			c.cleanup(ctx, e)
			cancel()
		}
	}
}
