package xds

import (
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A burst of refused streams writes at most a burst of lines; the next line written after it says how many
// were left out, so every refusal is accounted for, and the counters still count each one.
func TestConnectionLogIsRateLimited(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, twoClusters(), func(_ *testEnv, o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	const flood = connLogBurst + 100
	refuse := func() error {
		stream, err := e.dial(t).StreamAggregatedResources(t.Context())
		if err != nil {
			return err
		}
		if err := stream.Send(&discovery.DiscoveryRequest{Node: node("sidecar~not-an-id", nil), TypeUrl: ClusterType}); err != nil {
			return err
		}
		if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
			return status.Errorf(codes.Unknown, "stream ended with %v, want InvalidArgument", err)
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, flood)
	for range flood {
		wg.Go(func() {
			if err := refuse(); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	count := regexp.MustCompile(`suppressed=(\d+)`)
	// tally counts the refusal lines of the log and the refusals they say were left out.
	tally := func() (lines []string, written, suppressed int) {
		lines = strings.Split(strings.TrimSpace(logs.String()), "\n")
		for _, line := range lines {
			if !strings.Contains(line, "rejected stream: bad node") {
				continue
			}
			written++
			if m := count.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[1])
				suppressed += n
			}
		}
		return lines, written, suppressed
	}
	_, written, counted := tally()
	t.Logf("%d of %d refusals logged during the burst", written, flood)
	if written >= flood {
		t.Fatalf("all %d refusals were logged: not rate-limited", flood)
	}
	// Lines written as tokens came back during a slow burst already carry some counts; the rest are owed.
	owed := flood - written - counted

	time.Sleep(2 * time.Second / connLogRate) // a token for the next line
	if err := refuse(); err != nil {
		t.Fatal(err)
	}
	lines, written, suppressed := tally()
	if last := lines[len(lines)-1]; !strings.Contains(last, "rejected stream: bad node") ||
		owed > 0 && !strings.Contains(last, "suppressed="+strconv.Itoa(owed)) {
		t.Fatalf("the line after the burst does not count the %d lines left out: %s", owed, last)
	}
	if written+suppressed != flood+1 {
		t.Errorf("%d lines written and %d counted as left out, want the %d refusals", written, suppressed, flood+1)
	}
	if n := e.srv.Counters().Refused; n != flood+1 {
		t.Errorf("refused counter %d, want %d", n, flood+1)
	}
}
