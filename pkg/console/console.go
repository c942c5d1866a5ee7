// Package console is the cluster's web console, served by the master
// leader at / of its HTTP port (the one of /metrics) and proxied there by
// the other masters: the cluster at a glance (masters, nodes with their
// state and disk, volumes), partitions by health with recovery progress,
// live charts of metadata and data operations and bytes per second, and
// the last events.
//
// It is read-only and, like /metrics, plain HTTP: bind the port to a
// management network (docs/security.md). The page is static HTML with a
// small script and uPlot (vendored, MIT) for the charts: no build step.
// Everything it shows comes from /api/overview, which is also there for
// scripts.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cairnfs/cairn/pkg/clustermap"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
)

// Source is what the console reads: the master it runs in.
type Source interface {
	// IsLeader reports whether this master leads (cheap: no request).
	IsLeader() bool
	// Status is the cluster as the leader sees it ('cairn status');
	// an error when this master does not lead.
	Status(ctx context.Context) (*pb.StatusResponse, error)
	// LeaderHTTP is the HTTP address (host:port) of the leader's console,
	// when this master does not lead; "" when no leader is known.
	LeaderHTTP(ctx context.Context) string
}

// Bounds of what the console keeps.
const (
	sampleEvery = 5 * time.Second
	maxSamples  = 180 // 15 minutes of charts
	maxEvents   = 200
	scrapeLimit = 5 * time.Second
)

//go:embed assets/*
var assets embed.FS

// Console samples the cluster while its master leads and serves the page.
type Console struct {
	src  Source
	log  *slog.Logger
	http *http.Client

	mu      sync.Mutex
	last    *pb.StatusResponse
	totals  Totals
	totalAt time.Time
	samples []Sample
	events  []Event

	stop chan struct{}
	wg   sync.WaitGroup
}

// New returns a console of src; Start begins sampling.
func New(src Source, log *slog.Logger) *Console {
	return &Console{src: src, log: log, http: &http.Client{Timeout: scrapeLimit}, stop: make(chan struct{})}
}

// Start samples every few seconds until Stop (only while src leads).
func (c *Console) Start() {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			c.sample()
			select {
			case <-c.stop:
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends sampling and waits for it.
func (c *Console) Stop() {
	close(c.stop)
	c.wg.Wait()
}

// sample reads the status, notes what changed, and sums the nodes'
// counters into a chart point.
func (c *Console) sample() {
	var st *pb.StatusResponse
	err := errNotLeader
	ctx, cancel := context.WithTimeout(context.Background(), scrapeLimit)
	defer cancel()
	if c.src.IsLeader() {
		st, err = c.src.Status(ctx)
	}
	if err != nil {
		c.mu.Lock()
		c.last, c.totalAt = nil, time.Time{} // a new leader starts its own history
		c.mu.Unlock()
		return
	}
	var tot Totals
	for _, n := range st.GetNodes() {
		if n.GetMetricsAddr() == "" || n.GetNode().GetState() != pb.NodeState_NODE_STATE_ALIVE {
			continue
		}
		addr := clustermap.MetricsEndpoint(n.GetMetricsAddr(), n.GetNode().GetAddr())
		if err := c.scrape(ctx, addr, &tot); err != nil {
			c.log.Debug("console: scrape", "addr", addr, "err", err)
		}
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, diff(c.last, st, now.UnixMilli())...)
	if n := len(c.events); n > maxEvents {
		c.events = append(c.events[:0], c.events[n-maxEvents:]...)
	}
	if !c.totalAt.IsZero() {
		c.samples = append(c.samples, rate(c.totals, tot, now.Sub(c.totalAt).Seconds(), now.UnixMilli()))
		if n := len(c.samples); n > maxSamples {
			c.samples = append(c.samples[:0], c.samples[n-maxSamples:]...)
		}
	}
	c.last, c.totals, c.totalAt = st, tot, now
}

func (c *Console) scrape(ctx context.Context, addr string, into *Totals) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return into.addExposition(resp.Body)
}

var errNotLeader = errors.New("this master does not lead")

// Overview is what /api/overview answers.
type Overview struct {
	Status  json.RawMessage `json:"status"` // pb.StatusResponse in protojson
	Health  Health          `json:"health"`
	Samples []Sample        `json:"samples"`
	Events  []Event         `json:"events"`
}

// Handler serves the console: the page, its assets and /api/overview. On
// a master that does not lead, it proxies every request to the leader.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("/assets/", http.StripPrefix("/assets/", http.FileServer(http.FS(static))))
	mux.HandleFunc("/api/overview", c.overview)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		b, _ := assets.ReadFile("assets/index.html")
		_, _ = w.Write(b)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.src.IsLeader() {
			c.proxy(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// proxy sends a request for the console to the leader's.
func (c *Console) proxy(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Cairn-Console-Proxied") != "" {
		http.Error(w, "this master does not lead and the request was proxied once already", http.StatusServiceUnavailable)
		return
	}
	leader := c.src.LeaderHTTP(r.Context())
	if leader == "" {
		http.Error(w, "no master leads the cluster now; try again in a few seconds", http.StatusServiceUnavailable)
		return
	}
	p := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: leader})
	r.Header.Set("X-Cairn-Console-Proxied", "1")
	p.ServeHTTP(w, r)
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), scrapeLimit)
	defer cancel()
	st, err := c.src.Status(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	// The port is plain HTTP: client identities and revocations stay off it.
	st.GetMap().Clients, st.GetMap().Revoked = nil, nil
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(st)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	c.mu.Lock()
	ov := Overview{Status: raw, Health: healthOf(st.GetMap()), Samples: append([]Sample(nil), c.samples...), Events: append([]Event(nil), c.events...)}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(ov)
}
