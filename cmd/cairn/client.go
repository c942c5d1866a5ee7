package main

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/client"
	pb "github.com/cairnfs/cairn/pkg/clusterpb"
	"github.com/cairnfs/cairn/pkg/localcluster"
	"github.com/cairnfs/cairn/pkg/pki"
)

func newClientCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "client",
		Short: "Issue, list and revoke client identities with capabilities",
		Long: `A client identity is a certificate of the cluster's CA for a mount or an SDK
program, with its capabilities written into it: the one volume it may use, the
subtree of that volume, read-only, root squash and id maps. Every meta and data
node enforces them on every request. The master records each identity, for
'cairn client list' and 'cairn client revoke'.

Creating one needs the cluster's CA (--ca, or that of a 'cairn up' cluster
through --data-dir) and an admin identity. The private key is made on this host
and written only to --out. To change a client's capabilities, revoke it and
create it again.`,
		Args: noArgs,
	}
	cmd.AddCommand(newClientCreateCmd(), newClientListCmd(), newClientRevokeCmd())
	return cmd
}

func newClientCreateCmd() *cobra.Command {
	var (
		f                fsFlags
		ca, out, path    string
		readOnly, squash bool
		uidMaps, gidMaps []string
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Issue a client identity into --out",
		Example: `  cairn client create analytics --volume default --path /datasets --read-only --out ./analytics-tls
  cairn client create build --volume default --root-squash --uid-map 1000:20000:1000 --out /etc/cairn/build
  cairn mount --tls-dir ./analytics-tls --volume default /mnt/datasets`,
		Args: exactArgs(1, "a client name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if out == "" {
				return usagef(cmd, "--out is required: the directory to write the identity (ca.crt, tls.crt, tls.key) into")
			}
			if ca == "" {
				if len(f.masters) > 0 {
					return usagef(cmd, "--ca is required with --master: the directory of the cluster's CA")
				}
				ca = localcluster.TLSDir(f.dataDir, localcluster.CAIdentity)
			}
			if !pki.CAExists(ca) {
				return usagef(cmd, "no CA in %s (ca.crt and ca.key): pass --ca", ca)
			}
			caps := capability.Caps{Volume: f.volume, Path: path, ReadOnly: readOnly, RootSquash: squash}
			for _, list := range []struct {
				flags []string
				to    *[]capability.IDRange
			}{{uidMaps, &caps.UIDMap}, {gidMaps, &caps.GIDMap}} {
				for _, s := range list.flags {
					r, err := capability.ParseIDRange(s)
					if err != nil {
						return usageError{err, cmd}
					}
					*list.to = append(*list.to, r)
				}
			}
			if caps.Path == "/" {
				caps.Path = ""
			}
			if caps.Path != "" && (!strings.HasPrefix(caps.Path, "/") || filepath.Clean(caps.Path) != caps.Path) {
				return usagef(cmd, "--path %q: give an absolute path with no . or .. components and no trailing /", path)
			}
			return f.createClient(cmd, name, ca, out, caps)
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&ca, "ca", "", "directory of the cluster's CA (default: that of the --data-dir cluster)")
	fl.StringVar(&out, "out", "", "identity directory to write (pass it to 'cairn mount --tls-dir')")
	fl.StringVar(&path, "path", "", "confine the client to this directory of the volume and what is below it")
	fl.BoolVar(&readOnly, "read-only", false, "the client changes nothing (EROFS)")
	fl.BoolVar(&squash, "root-squash", false, "uid and gid 0 of the client become 65534 (nobody)")
	fl.StringArrayVar(&uidMaps, "uid-map", nil, "CLIENT:CLUSTER[:COUNT]: the client's uids CLIENT.. become CLUSTER.. (repeatable)")
	fl.StringArrayVar(&gidMaps, "gid-map", nil, "CLIENT:CLUSTER[:COUNT]: the same for gids (repeatable)")
	return cmd
}

// createClient creates the client: it finds the volume (and the directory of
// --path), signs the certificate, records it with the master, and only
// then writes it, so that no identity exists that the master cannot list
// or revoke.
func (f *fsFlags) createClient(cmd *cobra.Command, name, ca, out string, caps capability.Caps) error {
	return withMaster(cmd, &f.clusterFlags, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
		vol, err := m.GetVolume(ctx, &pb.VolumeRequest{Name: caps.Volume}, o...)
		if err != nil {
			return err
		}
		caps.VolumeID = vol.Volume.Id
		if caps.Path != "" {
			if caps.RootIno, err = f.dirIno(cmd, caps.Path); err != nil {
				return err
			}
		}
		ext, err := caps.Extension()
		if err != nil {
			return usageError{err, cmd}
		}
		is, err := pki.Sign(ca, pki.Request{Name: name, Kind: pki.KindClient, Extensions: []pkix.Extension{ext}})
		if err != nil {
			return err
		}
		if _, err := m.CreateClient(ctx, &pb.CreateClientRequest{Client: &pb.Client{
			Name: name, Serial: pki.Serial(is.Cert), Caps: ext.Value, NotAfterUnixMs: is.Cert.NotAfter.UnixMilli(),
		}}, o...); err != nil {
			return err
		}
		if err := is.Write(out); err != nil {
			return fmt.Errorf("client %q is recorded but its identity could not be written (revoke it and create it again): %w", name, err)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "created client %q (serial %s, %s) into %s\n", name, pki.Serial(is.Cert), describeCaps(caps), out)
		return nil
	})
}

// dirIno is the inode number of directory path of the volume, looked up
// with this command's (admin) identity.
func (f *fsFlags) dirIno(cmd *cobra.Command, path string) (uint64, error) {
	v, err := f.open(cmd)
	if err != nil {
		return 0, err
	}
	defer v.Close()
	ctx, cancel := f.context()
	defer cancel()
	a, err := v.StatPath(ctx, path, client.Cred{})
	if err != nil {
		return 0, fmt.Errorf("--path %s: %w", path, err)
	}
	if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return 0, fmt.Errorf("--path %s: not a directory", path)
	}
	return a.Ino, nil
}

// describeCaps says what a client may do, in a few words.
func describeCaps(c capability.Caps) string {
	var parts []string
	if c.Volume != "" {
		parts = append(parts, "volume "+c.Volume)
	} else {
		parts = append(parts, "every volume")
	}
	if c.Subtree() {
		parts = append(parts, "path "+c.Path)
	}
	if c.ReadOnly {
		parts = append(parts, "read-only")
	} else {
		parts = append(parts, "read-write")
	}
	if c.RootSquash {
		parts = append(parts, "root squash")
	}
	for _, r := range c.UIDMap {
		parts = append(parts, "uid map "+r.String())
	}
	for _, r := range c.GIDMap {
		parts = append(parts, "gid map "+r.String())
	}
	return strings.Join(parts, ", ")
}

func newClientListCmd() *cobra.Command {
	var (
		cf     clusterFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the client identities the cluster issued",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMaster(cmd, &cf, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
				resp, err := m.ListClients(ctx, &pb.ListClientsRequest{}, o...)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd, resp.Clients)
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tSTATE\tCAPABILITIES\tSERIAL\tCREATED")
				for _, c := range resp.Clients {
					var caps capability.Caps
					desc := "unreadable capabilities"
					if json.Unmarshal(c.Caps, &caps) == nil {
						desc = describeCaps(caps)
					}
					state := "valid"
					if c.RevokedUnixMs != 0 {
						state = "revoked " + time.UnixMilli(c.RevokedUnixMs).UTC().Format(time.DateTime)
					} else if c.NotAfterUnixMs != 0 && c.NotAfterUnixMs < time.Now().UnixMilli() {
						state = "expired"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", c.Name, state, desc, c.Serial, time.UnixMilli(c.CreatedUnixMs).UTC().Format(time.DateTime))
				}
				return w.Flush()
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newClientRevokeCmd() *cobra.Command {
	var cf clusterFlags
	cmd := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a client identity: every server refuses it within a heartbeat",
		Args:  exactArgs(1, "a client name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withMaster(cmd, &cf, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
				resp, err := m.Revoke(ctx, &pb.RevokeRequest{Client: args[0]}, o...)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "revoked client %q (serial %s) at map epoch %d\n", args[0], resp.Serial, resp.Epoch)
				return nil
			})
		},
	}
	cf.add(cmd)
	return cmd
}

func newCertRevokeCmd() *cobra.Command {
	var (
		cf             clusterFlags
		certFile, hexS string
	)
	cmd := &cobra.Command{
		Use:   "revoke",
		Short: "Revoke any certificate (a node's, an admin's) by its file or serial",
		Long: `Put a certificate on the cluster's revocation list: every master, meta node and
data node refuses it, at the handshake and on connections already open, from
its next heartbeat on. Prefer 'cairn client revoke NAME' for client identities.`,
		Example: "  cairn cert revoke --cert /etc/cairn/old-node/tls.crt\n  cairn cert revoke --serial 3f9a0c...",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &pb.RevokeRequest{}
			if hexS != "" {
				// openssl prints serials upper-case, zero-padded, maybe
				// with colons; the list holds pki.Serial's form.
				n, ok := new(big.Int).SetString(strings.ReplaceAll(hexS, ":", ""), 16)
				if !ok || n.Sign() <= 0 {
					return usagef(cmd, "--serial %q: not a hexadecimal serial number", hexS)
				}
				req.Serial = n.Text(16)
			}
			switch {
			case certFile != "" && hexS != "":
				return usagef(cmd, "give --cert or --serial, not both")
			case certFile != "":
				c, err := readCert(certFile)
				if err != nil {
					return usageError{err, cmd}
				}
				req.Serial, req.NotAfterUnixMs = pki.Serial(c), c.NotAfter.UnixMilli()
			case hexS == "":
				return usagef(cmd, "give --cert FILE or --serial HEX")
			}
			return withMaster(cmd, &cf, func(ctx context.Context, m pb.MasterClient, o ...grpc.CallOption) error {
				resp, err := m.Revoke(ctx, req, o...)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "revoked serial %s at map epoch %d\n", resp.Serial, resp.Epoch)
				return nil
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().StringVar(&certFile, "cert", "", "the certificate file (PEM) to revoke")
	cmd.Flags().StringVar(&hexS, "serial", "", "the serial number to revoke, in hexadecimal")
	return cmd
}

// readCert reads the first certificate of a PEM file.
func readCert(file string) (*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return x509.ParseCertificate(block.Bytes)
}
