package xds

import (
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// A push round is one INFO line: the snapshot version, how many proxies it reached, the responses by type
// and the bytes sent. Responses to a proxy's own requests are not a push. Rounds within a second of the
// last line are summed up in one more line.
func TestPushRoundLogged(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, twoClusters(), func(_ *testEnv, o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	line := regexp.MustCompile(`msg="config pushed" version=(\d+) proxies=(\d+) responses=(\S+) bytes=(\d+)( rounds=(\d+))?`)
	pushed := func() [][]string { return line.FindAllStringSubmatch(logs.String(), -1) }
	var clients []*sotwClient
	for i := range 2 {
		c := e.sotw(t)
		ask(c, sidecar(fmt.Sprintf("pod%d", i), "ns1"), ClusterType, nil, nil)
		ask(c, nil, ClusterType, nil, c.recv())
		clients = append(clients, c)
	}
	time.Sleep(100 * time.Millisecond)
	if got := pushed(); len(got) != 0 {
		t.Fatalf("answers to the proxies' requests logged as pushes: %q", got)
	}

	v := e.set(ClusterType, "a", "a2")
	for _, c := range clients {
		c.recv()
	}
	eventually(t, "the push round line", func() bool { return len(pushed()) == 1 })
	got := pushed()[0]
	if bytes, _ := strconv.Atoi(got[4]); got[1] != strconv.FormatUint(v, 10) || got[2] != "2" || got[3] != "Cluster:2" || bytes == 0 {
		t.Fatalf("line %q, want version %d, 2 proxies, Cluster:2 and the bytes", got[0], v)
	}

	for i := range 5 {
		e.set(ClusterType, "a", fmt.Sprintf("a%d", i+3))
		for _, c := range clients {
			c.recv()
		}
	}
	if n := len(pushed()); n != 1 {
		t.Fatalf("rounds within a second of the last line wrote %d lines at once", n-1)
	}
	eventually(t, "the rounds summed up", func() bool { return len(pushed()) == 2 })
	got = pushed()[1]
	// Five changes, two responses each; how many rounds they made depends on whether the push queue drained
	// between two changes.
	rounds := 1 // a line for one round leaves the count out
	if got[6] != "" {
		rounds, _ = strconv.Atoi(got[6])
	}
	if got[2] != "2" || rounds < 1 || rounds > 5 || got[3] != "Cluster:10" {
		t.Fatalf("summary line %q", got[0])
	}
}
