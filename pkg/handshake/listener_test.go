package handshake

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// mutualTLS returns a server and a client configuration that authenticate
// each other with one self-signed certificate.
func mutualTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"}, DNSNames: []string{"test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	client = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "test"}
	return server, client
}

// echoServer serves l: every accepted connection echoes what it reads.
func echoServer(t *testing.T, l *Listener) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
	})
}

func listen(t *testing.T, hs Func, lim Limits) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, hs, Options{Limits: lim, Name: "test", Logger: quiet})
	echoServer(t, l)
	return l
}

// dialFrom opens a TCP connection to addr from local address 127.0.0.k
// (Linux routes all of 127/8 to the loopback device).
func dialFrom(t *testing.T, k byte, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, k)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.%d: %v", k, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echoOnce dials addr with TLS conf and checks that the server echoes.
func echoOnce(t *testing.T, addr string, conf *tls.Config) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, conf)
	if err != nil {
		t.Fatalf("authenticated dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	msg := []byte("hello")
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo: %q, %v", got, err)
	}
}

// waitStats waits until cond holds of l's counters.
func waitStats(t *testing.T, l *Listener, what string, cond func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := l.Stats()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: stats %+v", what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// isClosedSoon reports whether the server closes c within d.
func isClosedSoon(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// Idle connections from 10 sources, 6 each, against a per-source bound of
// 4 and an overall bound of 8: the listener refuses and evicts exactly as
// its Gate says (replayed here on a gate of its own), the refused and
// evicted connections are closed at once, 8 stay in their handshake, and
// an authenticated client still gets through at once.
func TestListenerBoundsIdleConnections(t *testing.T) {
	srv, cli := mutualTLS(t)
	lim := Limits{Timeout: 20 * time.Second, MaxPerSource: 4, MaxPending: 8}
	l := listen(t, TLS(srv), lim)
	addr := l.Addr().String()
	model := NewGate(lim)
	var conns []net.Conn
	closed := map[int]bool{} // what the model says the server closed
	for k := byte(2); k < 12; k++ {
		for range 6 {
			i := len(conns)
			c := dialFrom(t, k, addr)
			conns = append(conns, c)
			if _, v := model.Admit(Source(c.LocalAddr()), func() { closed[i] = true }); v == RefusedSource {
				closed[i] = true
			}
			// One at a time, so that the listener sees them in this order.
			waitStats(t, l, "the connection accepted", func(s Stats) bool {
				return s.Admitted+s.RefusedSource == uint64(len(conns))
			})
		}
	}
	st, want := l.Stats(), model.Stats()
	if st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	if st.Pending != 8 || st.RefusedSource == 0 || st.Evicted == 0 {
		t.Fatalf("stats %+v: want both bounds reached", st)
	}
	for i, c := range conns {
		if got := isClosedSoon(c, 200*time.Millisecond); got != closed[i] {
			t.Errorf("connection %d from %v: closed %v, want %v", i, c.LocalAddr(), got, closed[i])
		}
	}
	echoOnce(t, addr, cli)
	st = l.Stats()
	if st.Completed != 1 || st.Evicted != want.Evicted+1 || st.Pending != 7 {
		t.Fatalf("after the authenticated client: %+v (before: %+v)", st, want)
	}
}

// A connection that says nothing is closed after Timeout; one that says
// something else than TLS is closed at once; neither reaches Accept.
func TestListenerTimeoutAndFailure(t *testing.T) {
	srv, cli := mutualTLS(t)
	l := listen(t, TLS(srv), Limits{Timeout: 300 * time.Millisecond})
	addr := l.Addr().String()
	idle := dialFrom(t, 2, addr)
	start := time.Now()
	if !isClosedSoon(idle, 5*time.Second) {
		t.Fatal("an idle connection was not closed")
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 3*time.Second {
		t.Errorf("idle connection closed after %v, want about 300ms", d)
	}
	waitStats(t, l, "the timeout counted", func(s Stats) bool { return s.TimedOut == 1 && s.Pending == 0 })

	junk := dialFrom(t, 2, addr)
	if _, err := junk.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if !isClosedSoon(junk, 2*time.Second) {
		t.Fatal("a connection speaking HTTP was not closed")
	}
	waitStats(t, l, "the failure counted", func(s Stats) bool { return s.Failed == 1 && s.Pending == 0 })

	// A client of another certificate fails its handshake too.
	_, other := mutualTLS(t)
	if c, err := tls.Dial("tcp", addr, other); err == nil {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a client of another CA was served")
		}
		c.Close()
	}
	echoOnce(t, addr, cli)
	waitStats(t, l, "counts", func(s Stats) bool { return s.Failed == 2 && s.Completed == 1 && s.TimedOut == 1 })
}

// Close closes the connections in their handshake and ends Accept.
func TestListenerClose(t *testing.T) {
	srv, _ := mutualTLS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, TLS(srv), Options{Logger: quiet})
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		accepted <- err
	}()
	c := dialFrom(t, 2, ln.Addr().String())
	waitStats(t, l, "the connection admitted", func(s Stats) bool { return s.Pending == 1 })
	closed := make(chan struct{})
	go func() {
		l.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if !isClosedSoon(c, time.Second) {
		t.Fatal("the pending connection was not closed")
	}
	// A listener closed before its first Accept starts nothing.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l2 := NewListener(ln2, TLS(srv), Options{Logger: quiet})
	l2.Close()
	if _, err := l2.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on a closed listener: %v", err)
	}
}

// A client whose certificate the server refuses, and which goes on
// writing after its side of the handshake is done (a TLS 1.3 client's side
// ends before the server has checked its certificate; gRPC then writes its
// preface and settings), reads the server's alert rather than failing a
// write with "broken pipe": the refusal's reason reaches it every time.
func TestRefusedClientReadsTheAlert(t *testing.T) {
	srv, cli := mutualTLS(t)
	srv = srv.Clone()
	srv.VerifyPeerCertificate = func([][]byte, [][]*x509.Certificate) error {
		time.Sleep(20 * time.Millisecond) // the first request arrives first
		return errors.New("revoked")
	}
	l := listen(t, TLS(srv), Limits{Timeout: 2 * time.Second})
	echoServer(t, l)
	for i := range 5 {
		c, err := tls.Dial("tcp", l.Addr().String(), cli)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("preface")); err != nil {
			t.Fatalf("connection %d: first write: %v", i, err)
		}
		time.Sleep(100 * time.Millisecond) // the server has refused
		_, werr := c.Write([]byte("settings"))
		_, rerr := c.Read(make([]byte, 1))
		c.Close()
		if werr != nil || rerr == nil || !strings.Contains(rerr.Error(), "remote error: tls: bad certificate") {
			t.Fatalf("connection %d: second write %v, read %v; want the write to go through and the server's alert", i, werr, rerr)
		}
	}
}
