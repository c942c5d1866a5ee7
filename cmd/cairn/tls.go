package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/pki"
)

// tlsEnv names an identity directory when --tls-dir is not given.
const tlsEnv = "CAIRN_TLS_DIR"

// tlsFlags are how a command that serves or connects finds its mutual TLS
// identity: --tls-dir, $CAIRN_TLS_DIR, or (for clients of a 'cairn up'
// cluster found through --data-dir) the cluster's admin identity.
// --insecure runs in plain text, for a cluster started that way.
type tlsFlags struct {
	dir      string
	insecure bool
}

func (t *tlsFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&t.dir, "tls-dir", "", "directory of this process's TLS identity: ca.crt, tls.crt, tls.key (see 'cairn cert issue'; default $"+tlsEnv+")")
	f.BoolVar(&t.insecure, "insecure", false, "no TLS: plain-text connections, no certificate checked (only for a cluster whose every process runs with --insecure)")
}

// identity loads the identity; fallback, if not empty, is where to look
// when neither --tls-dir nor the environment names one. It returns nil
// with --insecure.
func (t *tlsFlags) identity(cmd *cobra.Command, fallback string) (*pki.Identity, error) {
	dir := t.dir
	if dir == "" {
		dir = os.Getenv(tlsEnv)
	}
	if t.insecure {
		return nil, nil // wins over an identity named by the environment or a config file
	}
	if dir == "" && fallback != "" && pki.Exists(fallback) {
		dir = fallback
	}
	if dir == "" {
		return nil, usagef(cmd, "no TLS identity: pass --tls-dir DIR (ca.crt, tls.crt and tls.key, from 'cairn cert issue'), set %s, or use --data-dir of a 'cairn up' cluster", tlsEnv)
	}
	id, err := pki.Load(dir)
	if err != nil {
		return nil, usageError{err, cmd}
	}
	return id, nil
}

func newCertCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Create a cluster CA and issue certificates",
		Long: `Every connection between Cairn processes, and from clients, is mutual TLS 1.3:
both ends present a certificate signed by the cluster's CA. 'cairn up' creates
the CA and its certificates under <data-dir>/tls by itself; these commands are
for clusters of several hosts, and for rotation.

A certificate's kind is its purpose: a node certificate serves and connects,
a client or admin certificate only connects. Every Cairn client, node to node
included, refuses a server that does not present a node certificate, so a
client's key cannot pose as a master or node. A node that dials another node
also expects the common name that node registered with.

Rotation needs no restart: issue a new certificate into a process's --tls-dir
and the process uses it for its next connections (it rereads the files within
a second). Keep a node's --name when reissuing its certificate: its peers
accept another name only once the node has restarted and registered with it.
To move to a new CA, put both CAs in every ca.crt first, then issue from the
new one, then drop the old one from ca.crt.`,
		Args: noArgs,
	}
	cmd.AddCommand(newCertCACmd(), newCertIssueCmd(), newCertRevokeCmd())
	return cmd
}

func newCertCACmd() *cobra.Command {
	var dir, name string
	cmd := &cobra.Command{
		Use:     "ca",
		Short:   "Create a cluster CA (ca.crt, ca.key) in --dir",
		Example: "  cairn cert ca --dir /etc/cairn/ca",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usagef(cmd, "--dir is required")
			}
			if err := pki.CreateCA(dir, name); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created CA %q in %s; keep %s secret\n", name, dir, pki.CAKey)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the CA")
	cmd.Flags().StringVar(&name, "name", "cairn CA", "the CA's name")
	return cmd
}

func newCertIssueCmd() *cobra.Command {
	var (
		ca, out, name, kind string
		hosts               []string
	)
	cmd := &cobra.Command{
		Use:   "issue",
		Short: "Issue a node, client or admin certificate into --out",
		Long: `Issue a certificate signed by the CA in --ca and write an identity directory
--out (ca.crt, tls.crt, tls.key) to pass as --tls-dir. Kinds: node (masters,
meta and data nodes; the only certificates issued for server use), client
(mounts and SDK users), admin (may also run administrative commands). Issuing
into an existing --out replaces the identity there: the process using it picks
it up within a second; a node's new certificate should keep its --name.`,
		Example: `  cairn cert issue --ca /etc/cairn/ca --kind node --name meta-3 --host 10.0.0.7 --out /etc/cairn/tls
  cairn cert issue --ca /etc/cairn/ca --kind admin --name ops --out ~/.cairn/tls`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ca == "" || out == "" || name == "" {
				return usagef(cmd, "--ca, --out and --name are required")
			}
			switch k := pki.Kind(kind); k {
			case pki.KindNode, pki.KindClient, pki.KindAdmin:
			default:
				return usagef(cmd, "--kind %q: use node, client or admin", kind)
			}
			if err := pki.Issue(ca, out, pki.Request{Name: name, Kind: pki.Kind(kind), Hosts: hosts}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "issued a %s certificate for %q into %s\n", kind, name, out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&ca, "ca", "", "directory of the CA (from 'cairn cert ca')")
	f.StringVar(&out, "out", "", "identity directory to write")
	f.StringVar(&name, "name", "", "the holder's name")
	f.StringVar(&kind, "kind", "node", "node, client or admin")
	f.StringSliceVar(&hosts, "host", nil, "host names and addresses to put in the certificate (for TLS clients that check them)")
	return cmd
}
