package main

/*
#include <stdlib.h>
#include "cairn.h"
*/
import "C"

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/pkg/client"
	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/pki"
)

// config is what cairn_open takes, as a JSON object. Masters and TLSDir
// default to those of the 'cairn up' cluster in DataDir (its admin
// identity); Uid and Gid (nil: the process's) and Groups are the identity
// every call acts for.
type config struct {
	Masters   []string `json:"masters"`
	Volume    string   `json:"volume"`
	TLSDir    string   `json:"tls_dir"`
	DataDir   string   `json:"data_dir"`
	Insecure  bool     `json:"insecure"`
	Uid       *uint32  `json:"uid"`
	Gid       *uint32  `json:"gid"`
	Groups    []uint32 `json:"groups"`
	TimeoutMs int64    `json:"timeout_ms"` // bounds the open and every call; 0: 30 s
}

// session is an open volume and the identity its calls act for.
type session struct {
	v       *client.Volume
	cred    client.Cred
	timeout time.Duration
}

// ctx bounds one call.
func (s *session) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

var sessions table[*session]

// dialTimeout bounds the reachability check of one master.
const dialTimeout = 3 * time.Second

// alertWait is how long the probe waits for a TLS alert after its
// handshake.
const alertWait = 300 * time.Millisecond

// defaultTimeout bounds a call when the config names no timeout.
const defaultTimeout = 30 * time.Second

// cairn_open opens the volume configJSON (a config) names and returns its
// handle.
//
//export cairn_open
func cairn_open(configJSON *C.char, errOut **C.char) C.int64_t {
	return guard(errOut, func() (int64, error) {
		var c config
		if err := json.Unmarshal([]byte(C.GoString(configJSON)), &c); err != nil {
			return 0, errnoErr("open", syscall.EINVAL, "configuration: %v", err)
		}
		s, err := open(c)
		if err != nil {
			return 0, err
		}
		return sessions.add(s), nil
	})
}

// cairn_close closes a client's volume; its open files must be closed first.
//
//export cairn_close
func cairn_close(h C.int64_t, errOut **C.char) C.int64_t {
	return guard(errOut, func() (int64, error) {
		s, err := sessions.remove(int64(h))
		if err != nil {
			return 0, err
		}
		return 0, s.v.Close()
	})
}

func open(c config) (*session, error) {
	const op = "open"
	if c.Volume == "" {
		return nil, errnoErr(op, syscall.EINVAL, "no volume named")
	}
	if c.DataDir != "" && (len(c.Masters) == 0 || (c.TLSDir == "" && !c.Insecure)) {
		l, err := localcluster.LoadLayout(c.DataDir)
		if err != nil {
			return nil, errnoErr(op, syscall.ENOENT, "no 'cairn up' cluster in data dir %s: %v", c.DataDir, err)
		}
		if len(c.Masters) == 0 {
			c.Masters = l.MasterAddrs()
		}
		if dir := localcluster.TLSDir(c.DataDir, localcluster.AdminIdentity); c.TLSDir == "" && !c.Insecure && pki.Exists(dir) {
			c.TLSDir = dir
		}
	}
	var masters []string
	for _, m := range c.Masters {
		for _, a := range strings.Split(m, ",") {
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, errnoErr(op, syscall.EINVAL, "master address %q: %v", a, err)
			}
			masters = append(masters, a)
		}
	}
	if len(masters) == 0 {
		return nil, errnoErr(op, syscall.EINVAL, "no master address: set CAIRN_MASTER, pass masters, or the data dir of a 'cairn up' cluster")
	}
	timeout := defaultTimeout
	if c.TimeoutMs > 0 {
		timeout = time.Duration(c.TimeoutMs) * time.Millisecond
	}
	var conf *tls.Config
	if !c.Insecure {
		if c.TLSDir == "" {
			return nil, errnoErr(op, syscall.EINVAL, "no TLS identity: set CAIRN_TLS_DIR, pass tls_dir (ca.crt, tls.crt, tls.key), or the data dir of a 'cairn up' cluster")
		}
		id, err := pki.Load(c.TLSDir)
		if err != nil {
			return nil, errnoErr(op, syscall.EINVAL, "TLS identity in %s: %v", c.TLSDir, err)
		}
		conf = id.ClientConfig()
	}
	if err := probe(masters, conf); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	v, err := client.Open(ctx, masters, c.Volume, &client.Options{OpTimeout: timeout, TLS: conf})
	if err != nil {
		if client.ErrnoOf(err) == syscall.ENOENT {
			return nil, errnoErr(op, syscall.ENOENT, "volume %q does not exist (create it with: cairn volume create %s)", c.Volume, c.Volume)
		}
		return nil, fmt.Errorf("open volume %q through the masters at %s (waited up to %s): %w", c.Volume, strings.Join(masters, ","), timeout, err)
	}
	cred := client.Cred{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()), Groups: c.Groups}
	if c.Uid != nil {
		cred.Uid = *c.Uid
	}
	if c.Gid != nil {
		cred.Gid = *c.Gid
	}
	if c.Groups == nil && c.Uid == nil {
		if gs, err := os.Getgroups(); err == nil {
			for _, g := range gs {
				cred.Groups = append(cred.Groups, uint32(g))
			}
		}
	}
	s := &session{v: v, cred: cred, timeout: timeout}
	return s, nil
}

// probe fails fast, with a plain reason, when no master accepts a
// connection or the first one that does refuses the TLS identity (the SDK
// would retry either until its deadline).
func probe(masters []string, conf *tls.Config) error {
	const op = "open"
	var last error
	for _, m := range masters {
		conn, err := net.DialTimeout("tcp", m, dialTimeout)
		if err != nil {
			last = err
			continue
		}
		defer conn.Close()
		if conf == nil {
			return nil
		}
		tc := conf.Clone()
		tc.NextProtos = []string{"h2"}
		t := tls.Client(conn, tc)
		_ = t.SetDeadline(time.Now().Add(dialTimeout))
		if err := t.Handshake(); err != nil {
			return errnoErr(op, syscall.EACCES, "TLS handshake with master %s failed (is the identity from this cluster's CA?): %v", m, err)
		}
		// TLS 1.3: the server checks the client's certificate after the
		// client's handshake is done, and says no with an alert.
		// An alert comes at once; a server that waits for the client to
		// speak first times the read out, which is a yes.
		_ = t.SetReadDeadline(time.Now().Add(alertWait))
		var b [1]byte
		if _, err := t.Read(b[:]); err != nil {
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) {
				return errnoErr(op, syscall.EACCES, "master %s refused this client's certificate: %v", m, err)
			}
		}
		return nil
	}
	return errnoErr(op, syscall.ECONNREFUSED, "no master at %s answered: %v", strings.Join(masters, ","), last)
}
