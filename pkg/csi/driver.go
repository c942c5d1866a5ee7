// Package csi is Cairn's Kubernetes CSI driver (`cairn csi`): the
// identity, controller and node services of the Container Storage
// Interface over a Cairn cluster.
//
// A CSI volume is a directory of a Cairn volume with a directory quota of
// the requested capacity (kind "subdir", the default), or a whole Cairn
// volume (kind "volume"); the StorageClass parameter "kind" chooses
// (volumeid.go). The controller creates, expands and deletes them through
// the SDK and the masters, and needs an admin identity (quotas and
// volumes are admin operations). The node service publishes a volume by
// mounting it with FUSE at the target path: a `cairn mount` process per
// target (Mounter), in its own session, so that the driver's process can
// stop and start again without taking the applications' mounts with it
// (a restart of its container does end them: docs/ecosystem.md).
// Every access mode is supported, ReadWriteMany included: Cairn mounts
// share one namespace with close-to-open consistency.
package csi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairnfs/cairn/pkg/client"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/masterclient"
)

// PluginName is the driver's name, as StorageClasses name it
// (provisioner: csi.cairnfs.io).
const PluginName = "csi.cairnfs.io"

// Config is how a Driver reaches the cluster and serves.
type Config struct {
	// Endpoint is where the driver listens: unix:///path/csi.sock (the
	// kubelet's convention) or tcp://host:port.
	Endpoint string
	// NodeID is the node's name for NodeGetInfo (Kubernetes: the node
	// name); empty: the host name.
	NodeID string
	// Masters and TLS reach the cluster (an admin identity for the
	// controller; the node service's mounts use MountArgs).
	Masters []string
	TLS     *tls.Config
	// Mounter mounts and unmounts volumes at target paths.
	Mounter Mounter
	// Version is reported by GetPluginInfo.
	Version string
	Logger  *slog.Logger
}

// Driver serves the three CSI services. Safe for concurrent use.
type Driver struct {
	cfg Config
	log *slog.Logger
	mc  *masterclient.Client

	mu   sync.Mutex
	vols map[string]*client.Volume // open SDK volumes, by Cairn volume name
	busy map[string]bool           // volume ids and target paths with a call in progress
}

// New returns a Driver for cfg; Serve starts it.
func New(cfg Config) (*Driver, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.NodeID == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("node id: %w", err)
		}
		cfg.NodeID = h
	}
	if cfg.Mounter == nil {
		return nil, errors.New("csi: no mounter")
	}
	mc, err := masterclient.New(cfg.Masters, cfg.TLS, nil)
	if err != nil {
		return nil, err
	}
	return &Driver{cfg: cfg, log: cfg.Logger, mc: mc, vols: map[string]*client.Volume{}, busy: map[string]bool{}}, nil
}

// Close releases the driver's connections; mounts stay.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, v := range d.vols {
		v.Close()
	}
	d.vols = nil
	return d.mc.Close()
}

// Listen opens the endpoint: a unix socket (an old one is replaced) or a
// TCP address.
func Listen(endpoint string) (net.Listener, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	switch u.Scheme {
	case "unix":
		p := u.Path
		if p == "" {
			p = u.Opaque
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove the old socket: %w", err)
		}
		return net.Listen("unix", p)
	case "tcp":
		return net.Listen("tcp", u.Host)
	}
	return nil, fmt.Errorf("endpoint %q: want unix:///path or tcp://host:port", endpoint)
}

// Serve answers CSI calls on ln until ctx ends.
func (d *Driver) Serve(ctx context.Context, ln net.Listener) error {
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(d.logCalls))
	csipb.RegisterIdentityServer(srv, &identity{d: d})
	csipb.RegisterControllerServer(srv, &controller{d: d})
	csipb.RegisterNodeServer(srv, &node{d: d})
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	d.log.Info("csi driver serving", "endpoint", ln.Addr().String(), "node", d.cfg.NodeID)
	return srv.Serve(ln)
}

// logCalls logs every call with its outcome and duration; calls that
// change something at info level, queries at debug.
func (d *Driver) logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
	level := slog.LevelDebug
	if strings.HasPrefix(method, "Create") || strings.HasPrefix(method, "Delete") || strings.HasPrefix(method, "Node") && strings.Contains(method, "Publish") || strings.Contains(method, "Expand") {
		level = slog.LevelInfo
	}
	if err != nil {
		level = slog.LevelWarn
	}
	d.log.Log(ctx, level, "csi call", "method", method, "took", time.Since(start).Round(time.Millisecond), "err", err)
	return resp, err
}

// lock marks key (a volume id or a target path) busy for one call; a
// second call on it meanwhile is refused with ABORTED, as the CSI spec
// asks (the caller retries).
func (d *Driver) lock(key string) (func(), error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.busy[key] {
		return nil, status.Errorf(codes.Aborted, "an operation on %s is in progress", key)
	}
	d.busy[key] = true
	return func() {
		d.mu.Lock()
		delete(d.busy, key)
		d.mu.Unlock()
	}, nil
}

// volume returns the SDK's handle of Cairn volume name, opening it once.
func (d *Driver) volume(ctx context.Context, name string) (*client.Volume, error) {
	d.mu.Lock()
	v := d.vols[name]
	d.mu.Unlock()
	if v != nil {
		return v, nil
	}
	v, err := client.Open(ctx, d.cfg.Masters, name, &client.Options{TLS: d.cfg.TLS})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if old := d.vols[name]; old != nil {
		v.Close()
		return old, nil
	}
	d.vols[name] = v
	return v, nil
}

// forget drops the handle of a deleted volume.
func (d *Driver) forget(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v := d.vols[name]; v != nil {
		v.Close()
		delete(d.vols, name)
	}
}

type identity struct {
	csipb.UnimplementedIdentityServer
	d *Driver
}

func (s *identity) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	v := s.d.cfg.Version
	if v == "" {
		v = "dev"
	}
	return &csipb.GetPluginInfoResponse{Name: PluginName, VendorVersion: v}, nil
}

func (s *identity) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	svc := func(t csipb.PluginCapability_Service_Type) *csipb.PluginCapability {
		return &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: t}}}
	}
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: []*csipb.PluginCapability{
		svc(csipb.PluginCapability_Service_CONTROLLER_SERVICE),
		{Type: &csipb.PluginCapability_VolumeExpansion_{VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{
			Type: csipb.PluginCapability_VolumeExpansion_ONLINE}}},
	}}, nil
}

// Probe answers ready when a master leader answers.
func (s *identity) Probe(ctx context.Context, _ *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := s.d.mc.Do(ctx, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
		_, err := m.ListVolumes(ctx, &pb.ListVolumesRequest{}, o...)
		return err
	})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "no master answers: %v", err)
	}
	return &csipb.ProbeResponse{}, nil
}
