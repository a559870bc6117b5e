// Package loglevel gives a broker's loggers levels that change while it
// runs, as Kafka's BROKER_LOGGER resource changes log4j's: a root level
// and one per component (the "component" attribute the server gives each
// part's logger: kafka, broker, fsm, cometbft, ...). It imports nothing of
// Stele's.
package loglevel

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
)

// Root is the name of the logger every component falls back to, Kafka's
// root logger.
const Root = "root"

// Kafka's log levels (log4j's), as BROKER_LOGGER takes them.
var kafkaLevels = []struct {
	name  string
	level slog.Level
}{
	{"OFF", slog.LevelError + 1000},
	{"FATAL", slog.LevelError + 4},
	{"ERROR", slog.LevelError},
	{"WARN", slog.LevelWarn},
	{"INFO", slog.LevelInfo},
	{"DEBUG", slog.LevelDebug},
	{"TRACE", slog.LevelDebug - 4},
	{"ALL", slog.LevelDebug - 1000},
}

// ValidLevels lists Kafka's levels, as its error messages do.
const ValidLevels = "OFF, FATAL, ERROR, WARN, INFO, DEBUG, TRACE, ALL"

// Logger is one logger's level.
type Logger struct {
	Name  string
	Level string // Kafka's name of the effective level
	Set   bool   // set on this logger, not inherited from the root
}

// Levels holds the levels and wraps handlers to obey them. The zero value
// is not usable; use New.
type Levels struct {
	mu struct {
		sync.RWMutex
		root  slog.Level
		set   map[string]slog.Level // components with their own level
		known map[string]bool       // components seen
	}
}

// New returns levels whose root level is root.
func New(root slog.Level) *Levels {
	l := &Levels{}
	l.mu.root = root
	l.mu.set = map[string]slog.Level{}
	l.mu.known = map[string]bool{}
	return l
}

// Handler wraps h so that records pass only at their component's level.
func (l *Levels) Handler(h slog.Handler) slog.Handler {
	return &handler{levels: l, next: h, component: Root}
}

// Loggers returns the root logger and every component seen, by name.
func (l *Levels) Loggers() []Logger {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := []Logger{{Name: Root, Level: levelName(l.mu.root), Set: true}}
	names := make([]string, 0, len(l.mu.known))
	for n := range l.mu.known {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		lv, set := l.mu.set[n]
		if !set {
			lv = l.mu.root
		}
		out = append(out, Logger{Name: n, Level: levelName(lv), Set: set})
	}
	return out
}

// Exists reports whether name is the root logger or a component seen.
func (l *Levels) Exists(name string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return name == Root || l.mu.known[name]
}

// ParseLevel returns the slog level of one of Kafka's level names.
func ParseLevel(name string) (slog.Level, error) {
	for _, k := range kafkaLevels {
		if k.name == name {
			return k.level, nil
		}
	}
	return 0, fmt.Errorf("stele/loglevel: %q is not a supported log level; valid log levels are %s", name, ValidLevels)
}

// SetLevel sets a logger's level (Kafka's name); the root's applies to
// every component without a level of its own.
func (l *Levels) SetLevel(name, level string) error {
	lv, err := ParseLevel(level)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if name == Root {
		l.mu.root = lv
		return nil
	}
	l.mu.set[name] = lv
	l.mu.known[name] = true
	return nil
}

// Unset makes a component follow the root level again.
func (l *Levels) Unset(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.mu.set, name)
}

func (l *Levels) enabled(component string, lv slog.Level) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	min, ok := l.mu.set[component]
	if !ok {
		min = l.mu.root
	}
	return lv >= min
}

func (l *Levels) saw(component string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.known[component] = true
}

// levelName is the Kafka name of the highest Kafka level at or below lv.
func levelName(lv slog.Level) string {
	for _, k := range kafkaLevels {
		if lv >= k.level {
			return k.name
		}
	}
	return "ALL"
}

type handler struct {
	levels    *Levels
	next      slog.Handler
	component string
}

func (h *handler) Enabled(ctx context.Context, lv slog.Level) bool {
	return h.levels.enabled(h.component, lv)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	for _, a := range as {
		if a.Key == "component" {
			c.component = strings.TrimSpace(a.Value.String())
			h.levels.saw(c.component)
		}
	}
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}
