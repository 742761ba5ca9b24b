package xds

import (
	"context"
	"log/slog"
	"sync"

	"golang.org/x/time/rate"
)

// Connection lines (accepted, ended, refused) are written at most connLogBurst at once and connLogRate a
// second after that, per message: anyone who reaches the port can open streams far faster, and each line
// was written. The Counters count every connection; the log keeps a sample and says how much it left out.
const (
	connLogRate  = 20
	connLogBurst = 200
)

// limitedLog writes each message (a constant of the code, never a client's text) through a token bucket of
// its own. A line dropped is counted, and the next line of that message written carries the count as
// "suppressed".
type limitedLog struct {
	log   *slog.Logger
	rate  rate.Limit
	burst int

	mu    sync.Mutex
	kinds map[string]*logKind
}

type logKind struct {
	bucket     *rate.Limiter
	suppressed uint64
}

func newLimitedLog(log *slog.Logger, perSecond float64, burst int) *limitedLog {
	return &limitedLog{log: log, rate: rate.Limit(perSecond), burst: burst, kinds: map[string]*logKind{}}
}

func (l *limitedLog) Info(msg string, attrs ...any) { l.write(slog.LevelInfo, msg, attrs) }
func (l *limitedLog) Warn(msg string, attrs ...any) { l.write(slog.LevelWarn, msg, attrs) }

func (l *limitedLog) write(level slog.Level, msg string, attrs []any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	l.mu.Lock()
	k := l.kinds[msg]
	if k == nil {
		k = &logKind{bucket: rate.NewLimiter(l.rate, l.burst)}
		l.kinds[msg] = k
	}
	if !k.bucket.Allow() {
		k.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := k.suppressed
	k.suppressed = 0
	l.mu.Unlock()
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	l.log.Log(ctx, level, msg, attrs...)
}
