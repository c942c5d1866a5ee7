package main

import (
	"slices"
	"strings"
	"testing"
)

func TestFstabArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args string
		want string // cairn's arguments, space-separated; "" for an error
		log  string
		fake bool
	}{
		{"the issue's line", "cairn#photos /mnt/x -o rw,master=10.0.0.1:17000+10.0.0.2:17000,_netdev",
			"mount --master 10.0.0.1:17000,10.0.0.2:17000 photos /mnt/x", "/var/log/cairn/mount-mnt-x.log", false},
		{"type given, plain source", "photos /mnt/x -o master=h:1", "mount --master h:1 photos /mnt/x", "", false},
		{"identity, mount options, systemd's", "cairn#v /m -n -o tls_dir=/etc/cairn/c,ro,allow_other,op_timeout=5,x-systemd.automount,nofail,log=/tmp/l",
			"mount --tls-dir /etc/cairn/c -o ro,allow_other,op_timeout=5 v /m", "/tmp/l", false},
		{"a cairn up cluster", "cairn#default /m -odata_dir=/srv/cairn-data", "mount --data-dir /srv/cairn-data default /m", "", false},
		{"fake", "cairn#v /m -f -o master=h:1", "mount --master h:1 v /m", "", true},
		{"unknown options go to cairn mount, which refuses them", "cairn#v /m -o master=h:1,bogus", "mount --master h:1 -o bogus v /m", "", false},
		{"no volume", "cairn# /m -o master=h:1", "", "", false},
		{"one argument", "cairn#v -o master=h:1", "", "", false},
		{"master without addresses", "cairn#v /m -o master=", "", "", false},
		{"tls_dir without a value", "cairn#v /m -o tls_dir", "", "", false},
		{"-o at the end", "cairn#v /m -o", "", "", false},
		{"unknown flag", "cairn#v /m -x", "", "", false},
	} {
		args, _, log, fake, err := fstabArgs(strings.Fields(tc.args))
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s: %q accepted as %q", tc.name, tc.args, args)
			}
			continue
		}
		if err != nil || !slices.Equal(args, strings.Fields(tc.want)) || fake != tc.fake || tc.log != "" && log != tc.log {
			t.Errorf("%s: %q -> %q, log %q, fake %v, %v; want %q", tc.name, tc.args, args, log, fake, err, tc.want)
		}
	}
	if !isMountHelper("/sbin/mount.fuse.cairn") || !isMountHelper("mount.cairn") || isMountHelper("/usr/bin/cairn") {
		t.Error("isMountHelper")
	}
}
