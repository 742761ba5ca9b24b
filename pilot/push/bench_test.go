package push_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/push"
	"github.com/sextantmesh/sextant/pilot/store"
)

// BenchmarkAdd100kServicesToRunningPipeline writes 100k Services into the store of a running pipeline with
// the server's debounce settings, 1,000 at a time with a 30 ms pause (longer than the first-change quiet
// period), and times from the last write until the published snapshot holds them all (and, as a metric,
// from the first write).
func BenchmarkAdd100kServicesToRunningPipeline(b *testing.B) {
	const total, chunk = 100_000, 1000
	services := make([]*config.Config, total)
	for i := range services {
		ns, name := fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("svc-%d", i)
		services[i] = &config.Config{Key: config.Key{Kind: config.Service, Namespace: ns, Name: name}, Spec: &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{ClusterIP: fmt.Sprintf("10.%d.%d.%d", 100+i/65536, (i/256)%256, i%256),
				Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}}}
	}
	var builds uint64
	var fromFirst time.Duration
	for b.Loop() {
		b.StopTimer()
		st := store.New()
		p := push.New(push.Options{Store: st, DebounceAfter: 100 * time.Millisecond, DebounceMax: 10 * time.Second,
			DebounceFirst: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		p.Initialize()
		before := p.Stats().Builds
		ctx, cancel := context.WithCancel(context.Background())
		go p.Run(ctx)
		first := time.Now()
		for i, c := range services {
			st.Upsert(store.LayerFile, c)
			if (i+1)%chunk == 0 && i+1 < total {
				time.Sleep(30 * time.Millisecond)
			}
		}
		b.StartTimer()
		seen := before
		for {
			if n := p.Stats().Builds; n != seen {
				seen = n
				if p.Current().ServiceCount() == total {
					break
				}
			}
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		fromFirst += time.Since(first)
		builds += seen - before
		cancel()
		b.StartTimer()
	}
	b.ReportMetric(float64(builds)/float64(b.N), "builds/op")
	b.ReportMetric(float64(fromFirst.Milliseconds())/float64(b.N), "ms-from-first-write/op")
}
