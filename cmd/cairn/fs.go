package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/pkg/client"
)

// fsFlags are the flags of every `cairn fs` command.
type fsFlags struct {
	clusterFlags
	volume string
}

func (f *fsFlags) add(cmd *cobra.Command) {
	f.clusterFlags.add(cmd)
	cmd.Flags().StringVar(&f.volume, "volume", "default", "volume to work in")
}

// open connects to the volume. The timeout flag bounds every operation.
func (f *fsFlags) open(cmd *cobra.Command) (*client.Volume, error) {
	addrs, conf, err := f.endpoint(cmd)
	if err != nil {
		return nil, err
	}
	ctx, cancel := f.context()
	defer cancel()
	return client.Open(ctx, addrs, f.volume, &client.Options{OpTimeout: f.timeout, RefreshInterval: -1, TLS: conf})
}

func newFSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fs",
		Short: "Work with a volume's files without mounting it",
		Long: `Scripting access to a volume through the Cairn SDK, without FUSE. Paths are
absolute within the volume ("/" is its root; a relative path starts there too).
Symbolic links are followed in the middle of a path, not at its end.

With a client identity confined to a directory ('cairn client create --path
/sub'), "/" is that directory, as the identity's mount shows it, and ".." of
it is itself; an identity bound to one volume works in that volume unless
--volume says otherwise.`,
		Args: noArgs,
	}
	cmd.AddCommand(newFSLsCmd(), newFSStatCmd(), newFSMkdirCmd(), newFSPutCmd(), newFSGetCmd(), newFSRmCmd(), newFSMvCmd())
	return cmd
}

// fsVolume is a volume as the fs commands walk it: from root, the volume's
// root directory or, for an identity confined to a directory
// (capability.Caps.Subtree), that directory.
type fsVolume struct {
	*client.Volume
	root uint64
}

// fsRun opens the volume, runs fn and maps errno errors to one plain line.
// The volume is --volume, or the one the identity is bound to.
func fsRun(cmd *cobra.Command, f *fsFlags, fn func(ctx context.Context, v *fsVolume) error) error {
	caps, err := f.caps(cmd)
	if err != nil {
		return err
	}
	if caps.Volume != "" && !cmd.Flags().Changed("volume") {
		f.volume = caps.Volume
	}
	v, err := f.open(cmd)
	if err != nil {
		return plainError(err)
	}
	defer v.Close()
	fv := &fsVolume{Volume: v, root: client.RootIno}
	if caps.Subtree() {
		fv.root = caps.RootIno
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	return fn(ctx, fv)
}

// maxSymlinks bounds symbolic links followed while resolving one path, as
// Linux does (ELOOP past 40).
const maxSymlinks = 40

// splitPath cleans p and returns its components ("" components dropped).
func splitPath(p string) []string {
	p = path.Clean("/" + p)
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}

// resolve walks p from v's root and returns the attributes of its last
// component (not followed if it is a symbolic link). ".." of the root is
// the root, and an absolute symbolic link starts there again, so that a
// walk never leaves the tree the identity may reach.
func resolve(ctx context.Context, v *fsVolume, p string) (*client.Attr, error) {
	attr, err := v.GetAttr(ctx, v.root)
	if err != nil {
		return nil, err
	}
	parts := splitPath(p)
	links := 0
	var dirs []*client.Attr // the directories walked, for ".." and relative links
	for i := 0; i < len(parts); i++ {
		name := parts[i]
		if !attr.IsDir() {
			return nil, fmt.Errorf("%s: %w", p, syscall.ENOTDIR)
		}
		switch name {
		case ".":
			continue
		case "..":
			if len(dirs) > 0 {
				attr, dirs = dirs[len(dirs)-1], dirs[:len(dirs)-1]
			}
			continue
		}
		next, err := v.Lookup(ctx, attr.Ino, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", "/"+strings.Join(parts[:i+1], "/"), err)
		}
		if next.Mode&syscall.S_IFMT == syscall.S_IFLNK && i < len(parts)-1 {
			if links++; links > maxSymlinks {
				return nil, fmt.Errorf("%s: %w", p, syscall.ELOOP)
			}
			target, err := v.Readlink(ctx, next.Ino)
			if err != nil {
				return nil, err
			}
			if strings.HasPrefix(target, "/") {
				if attr, err = v.GetAttr(ctx, v.root); err != nil {
					return nil, err
				}
				dirs = nil
			}
			// The link's components replace it; a relative target starts in
			// the directory holding the link (attr), so ".." keeps meaning.
			var linkParts []string
			for _, c := range strings.Split(target, "/") {
				if c != "" {
					linkParts = append(linkParts, c)
				}
			}
			parts = append(linkParts, parts[i+1:]...)
			i = -1
			continue
		}
		dirs = append(dirs, attr)
		attr = next
	}
	return attr, nil
}

// parentOf resolves the directory holding p and returns it with p's last name.
func parentOf(ctx context.Context, v *fsVolume, p string) (*client.Attr, string, error) {
	parts := splitPath(p)
	if len(parts) == 0 {
		return nil, "", fmt.Errorf("/: %w", syscall.EEXIST)
	}
	dir, err := resolve(ctx, v, strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, "", err
	}
	if !dir.IsDir() {
		return nil, "", fmt.Errorf("%s: %w", p, syscall.ENOTDIR)
	}
	return dir, parts[len(parts)-1], nil
}

func typeChar(mode uint32) byte {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return 'd'
	case syscall.S_IFLNK:
		return 'l'
	case syscall.S_IFIFO:
		return 'p'
	case syscall.S_IFSOCK:
		return 's'
	case syscall.S_IFCHR:
		return 'c'
	case syscall.S_IFBLK:
		return 'b'
	}
	return '-'
}

func modeString(mode uint32) string {
	b := []byte{typeChar(mode)}
	for i, c := range "rwxrwxrwx" {
		if mode&(1<<(8-i)) != 0 {
			b = append(b, byte(c))
		} else {
			b = append(b, '-')
		}
	}
	return string(b)
}

func newFSLsCmd() *cobra.Command {
	var f fsFlags
	cmd := &cobra.Command{
		Use:   "ls [PATH]",
		Short: "List a directory (or show one file)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef(cmd, "expected at most one path, got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "/"
			if len(args) == 1 {
				p = args[0]
			}
			return fsRun(cmd, &f, func(ctx context.Context, v *fsVolume) error {
				a, err := resolve(ctx, v, p)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 1, ' ', 0)
				defer tw.Flush()
				line := func(name string, a *client.Attr) {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", modeString(a.Mode), a.Nlink, a.Uid, a.Gid, a.Size,
						a.Mtime.Format(time.DateTime), name)
				}
				if !a.IsDir() {
					line(path.Base(p), a)
					return nil
				}
				cursor := ""
				for {
					entries, more, err := v.ReadDirPlus(ctx, a.Ino, cursor, 1024)
					if err != nil {
						return err
					}
					for _, e := range entries {
						if e.Attr != nil {
							line(e.Name, e.Attr)
						}
						cursor = e.Name
					}
					if !more {
						return nil
					}
				}
			})
		},
	}
	f.add(cmd)
	return cmd
}

func newFSStatCmd() *cobra.Command {
	var f fsFlags
	cmd := &cobra.Command{
		Use:   "stat PATH",
		Short: "Show a file's attributes",
		Args:  exactArgs(1, "a path"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fsRun(cmd, &f, func(ctx context.Context, v *fsVolume) error {
				a, err := resolve(ctx, v, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "path:  %s\ninode: %d\nmode:  %s (%04o)\nlinks: %d\nowner: %d:%d\nsize:  %d\natime: %s\nmtime: %s\nctime: %s\n",
					path.Clean("/"+args[0]), a.Ino, modeString(a.Mode), a.Mode&0o7777, a.Nlink, a.Uid, a.Gid, a.Size,
					a.Atime.Format(time.RFC3339Nano), a.Mtime.Format(time.RFC3339Nano), a.Ctime.Format(time.RFC3339Nano))
				return nil
			})
		},
	}
	f.add(cmd)
	return cmd
}

func newFSMkdirCmd() *cobra.Command {
	var (
		f       fsFlags
		parents bool
	)
	cmd := &cobra.Command{
		Use:   "mkdir [-p] PATH",
		Short: "Create a directory",
		Args:  exactArgs(1, "a path"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fsRun(cmd, &f, func(ctx context.Context, v *fsVolume) error {
				if !parents {
					dir, name, err := parentOf(ctx, v, args[0])
					if err != nil {
						return err
					}
					_, err = v.Mkdir(ctx, dir.Ino, name, 0o755, uint32(os.Getuid()), uint32(os.Getgid()))
					return err
				}
				parts := splitPath(args[0])
				for i := range parts {
					sub := "/" + strings.Join(parts[:i+1], "/")
					dir, name, err := parentOf(ctx, v, sub)
					if err != nil {
						return err
					}
					_, err = v.Mkdir(ctx, dir.Ino, name, 0o755, uint32(os.Getuid()), uint32(os.Getgid()))
					if errors.Is(err, syscall.EEXIST) {
						if a, err := resolve(ctx, v, sub); err == nil && a.IsDir() {
							continue
						}
					}
					if err != nil {
						return fmt.Errorf("%s: %w", sub, err)
					}
				}
				return nil
			})
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create missing parents; an existing directory is not an error")
	return cmd
}

// copyChunk is how much put and get move per call.
const copyChunk = 1 << 20

func newFSPutCmd() *cobra.Command {
	var f fsFlags
	cmd := &cobra.Command{
		Use:     "put LOCAL_FILE PATH",
		Short:   "Copy a local file into the volume",
		Long:    "Copy a local file (or standard input with -) into the volume, replacing PATH if it is a file.",
		Example: "  cairn fs put ./report.pdf /docs/report.pdf\n  tar c src | cairn fs put - /backups/src.tar",
		Args:    exactArgs(2, "a local file and a volume path"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var src io.Reader = os.Stdin
			if args[0] != "-" {
				in, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer in.Close()
				src = in
			}
			return fsRun(cmd, &f, func(ctx context.Context, v *fsVolume) error {
				dir, name, err := parentOf(ctx, v, args[1])
				if err != nil {
					return err
				}
				a, err := v.Create(ctx, dir.Ino, name, 0o644, uint32(os.Getuid()), uint32(os.Getgid()))
				flags := os.O_WRONLY
				if errors.Is(err, syscall.EEXIST) {
					if a, err = v.Lookup(ctx, dir.Ino, name); err == nil && a.IsDir() {
						err = fmt.Errorf("%s: %w", args[1], syscall.EISDIR)
					}
					flags |= os.O_TRUNC
				}
				if err != nil {
					return err
				}
				file, err := v.OpenFile(ctx, a.Ino, flags)
				if err != nil {
					return err
				}
				buf := make([]byte, copyChunk)
				var off int64
				for {
					n, rerr := io.ReadFull(src, buf)
					if n > 0 {
						if _, err := file.WriteAt(buf[:n], off); err != nil {
							file.Close(ctx)
							return err
						}
						off += int64(n)
					}
					if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
						break
					}
					if rerr != nil {
						file.Close(ctx)
						return fmt.Errorf("read %s: %w", args[0], rerr)
					}
				}
				return file.Close(ctx)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func newFSGetCmd() *cobra.Command {
	var f fsFlags
	cmd := &cobra.Command{
		Use:   "get PATH LOCAL_FILE",
		Short: "Copy a file out of the volume (- for standard output)",
		Args:  exactArgs(2, "a volume path and a local file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fsRun(cmd, &f, func(ctx context.Context, v *fsVolume) error {
				a, err := resolve(ctx, v, args[0])
				if err != nil {
					return err
				}
				if a.IsDir() {
					return fmt.Errorf("%s: %w", args[0], syscall.EISDIR)
				}
				file, err := v.OpenFile(ctx, a.Ino, os.O_RDONLY)
				if err != nil {
					return err
				}
				defer file.Close(ctx)
				var dst io.Writer = cmd.OutOrStdout()
				if args[1] != "-" {
					out, err := os.Create(args[1])
					if err != nil {
						return err
					}
					defer out.Close()
					dst = out
				}
				_, err = io.Copy(dst, io.NewSectionReader(file, 0, int64(file.Size())))
				return err
			})
		},
	}
	f.add(cmd)
	return cmd
}

func newFSRmCmd() *cobra.Command {
	var (
		f         fsFlags
		recursive bool
	)
	cmd := &cobra.Command{
		Use:   "rm [-r] PATH",
		Short: "Remove a file, or a directory tree with -r",
		Args:  exactArgs(1, "a path"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fsRun(cmd, &f, func(ctx context.Context, v *fsVolume) error {
				dir, name, err := parentOf(ctx, v, args[0])
				if err != nil {
					return err
				}
				a, err := v.Lookup(ctx, dir.Ino, name)
				if err != nil {
					return err
				}
				if !a.IsDir() {
					return v.Unlink(ctx, dir.Ino, name)
				}
				if !recursive {
					return fmt.Errorf("%s is a directory; use -r", args[0])
				}
				return v.RemoveTree(ctx, dir.Ino, name, a.Ino)
			})
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories and their contents")
	return cmd
}

func newFSMvCmd() *cobra.Command {
	var f fsFlags
	cmd := &cobra.Command{
		Use:   "mv SRC DST",
		Short: "Rename a file or directory (replacing DST if allowed)",
		Args:  exactArgs(2, "a source and a destination path"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fsRun(cmd, &f, func(ctx context.Context, v *fsVolume) error {
				sdir, sname, err := parentOf(ctx, v, args[0])
				if err != nil {
					return err
				}
				ddir, dname, err := parentOf(ctx, v, args[1])
				if err != nil {
					return err
				}
				if a, err := v.Lookup(ctx, ddir.Ino, dname); err == nil && a.IsDir() {
					// mv into an existing directory keeps the source's name.
					ddir, dname = a, sname
				}
				return v.Rename(ctx, sdir.Ino, sname, ddir.Ino, dname, 0)
			})
		},
	}
	f.add(cmd)
	return cmd
}
