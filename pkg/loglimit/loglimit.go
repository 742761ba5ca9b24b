// Package loglimit bounds what goes in the log: lines at a bounded rate, saying how many it left out;
// storms of events summed up once a second (Fold); and the text a client chose cut to a bounded length.
package loglimit

import (
	"context"
	"log/slog"
	"sync"

	"golang.org/x/time/rate"
)

// Log writes each message (a constant of the code, never a client's text) through a token bucket of
// its own. A line dropped is counted, and the next line of that message written carries the count as
// "suppressed".
type Log struct {
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

// New writes to log at most burst lines at once and perSecond a second after that, per message.
func New(log *slog.Logger, perSecond float64, burst int) *Log {
	return &Log{log: log, rate: rate.Limit(perSecond), burst: burst, kinds: map[string]*logKind{}}
}

func (l *Log) Info(msg string, attrs ...any) { l.write(slog.LevelInfo, msg, attrs) }
func (l *Log) Warn(msg string, attrs ...any) { l.write(slog.LevelWarn, msg, attrs) }

func (l *Log) write(level slog.Level, msg string, attrs []any) {
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
