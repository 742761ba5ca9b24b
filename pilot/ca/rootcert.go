package ca

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
)

// Names istiod uses for the root certificate published to workloads.
const (
	RootConfigMap    = "istio-ca-root-cert"
	RootConfigMapKey = "root-cert.pem"
)

// RootPublisherOptions configure a RootPublisher.
type RootPublisherOptions struct {
	Client  kubernetes.Interface
	RootPEM []byte
	// LeaseNamespace and LeaseName name the Lease that elects the one replica that writes.
	LeaseNamespace string
	LeaseName      string
	// Identity names this replica in the Lease (default: the host name and a random suffix).
	Identity string
	// Resync is how often every namespace's ConfigMap is checked again, which repairs edits and
	// deletions: ConfigMaps are not watched, so Sextant needs no right to list them (default 1m).
	Resync time.Duration
	// LeaseDuration, RenewDeadline and RetryPeriod are the leader election's (defaults 15s, 10s, 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Logger                                    *slog.Logger
}

// RootPublisher keeps the ConfigMap istio-ca-root-cert (root-cert.pem) in every namespace, as istiod
// does, so workloads find the mesh's root where Istio's injection mounts it. Only the replica holding
// the Lease writes.
type RootPublisher struct {
	opts RootPublisherOptions
	log  *slog.Logger
}

// NewRootPublisher returns a publisher; Run starts it.
func NewRootPublisher(opts RootPublisherOptions) *RootPublisher {
	if opts.Resync <= 0 {
		opts.Resync = time.Minute
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	if opts.Identity == "" {
		host, _ := os.Hostname()
		opts.Identity = host + "-" + rand.String(5)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &RootPublisher{opts: opts, log: opts.Logger}
}

// Run campaigns for the Lease until ctx ends, publishing while it leads.
func (p *RootPublisher) Run(ctx context.Context) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: p.opts.LeaseNamespace, Name: p.opts.LeaseName},
		Client:     p.opts.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: p.opts.Identity},
	}
	for ctx.Err() == nil {
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: p.opts.LeaseDuration, RenewDeadline: p.opts.RenewDeadline, RetryPeriod: p.opts.RetryPeriod,
			ReleaseOnCancel: true, Name: p.opts.LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					p.log.Info("publishing the mesh root as ConfigMap "+RootConfigMap+" in every namespace", "lease", p.opts.LeaseName,
						"identity", p.opts.Identity)
					p.publish(ctx)
				},
				OnStoppedLeading: func() { p.log.Info("no longer publishing the mesh root", "lease", p.opts.LeaseName) },
			},
		})
		if err != nil {
			p.log.Error("root publisher: leader election", "err", err)
			return
		}
		elector.Run(ctx) // returns when leadership is lost: campaign again
	}
}

// publish reconciles every namespace until ctx ends.
func (p *RootPublisher) publish(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(p.opts.Client, p.opts.Resync)
	nsInformer := factory.Core().V1().Namespaces()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			queue.Add(ns.Name)
		}
	}
	if _, err := nsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) }, // includes every resync
	}); err != nil {
		p.log.Error("root publisher", "err", err)
		return
	}
	lister := nsInformer.Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		name, quit := queue.Get()
		if quit {
			return
		}
		ns, err := lister.Get(name)
		if err == nil && ns.Status.Phase != corev1.NamespaceTerminating {
			err = p.reconcile(ctx, name)
		} else if apierrors.IsNotFound(err) {
			err = nil
		}
		if err != nil && ctx.Err() == nil {
			p.log.Warn("root publisher: ConfigMap "+RootConfigMap, "namespace", name, "err", err)
			queue.AddRateLimited(name)
		} else {
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

func (p *RootPublisher) reconcile(ctx context.Context, namespace string) error {
	cms := p.opts.Client.CoreV1().ConfigMaps(namespace)
	cm, err := cms.Get(ctx, RootConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: RootConfigMap, Namespace: namespace, Labels: map[string]string{"istio.io/config": "true"}},
			Data:       map[string]string{RootConfigMapKey: string(p.opts.RootPEM)},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return p.reconcile(ctx, namespace)
		}
		return err
	}
	if err != nil {
		return err
	}
	if bytes.Equal([]byte(cm.Data[RootConfigMapKey]), p.opts.RootPEM) {
		return nil
	}
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[RootConfigMapKey] = string(p.opts.RootPEM)
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}
