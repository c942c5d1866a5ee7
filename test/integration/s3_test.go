package integration

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/pkg/capability"
	"github.com/cairnfs/cairn/pkg/pki"
)

// s3Env reads the gateway's variables that 'cairn up' wrote to
// <dir>/s3.env.
func s3Env(t *testing.T, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "s3.env"))
	must(t, err)
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("s3.env line %q", line)
		}
		env[k] = v
	}
	for _, k := range []string{"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} {
		if env[k] == "" {
			t.Fatalf("s3.env has no %s:\n%s", k, b)
		}
	}
	return env
}

func s3Client(env map[string]string, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region: env["AWS_REGION"], BaseEndpoint: aws.String(env["AWS_ENDPOINT_URL"]), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(env["AWS_ACCESS_KEY_ID"], secret, ""),
	})
}

func md5Hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// TestS3Gateway drives the S3 gateway that a default 'cairn up' starts
// ('cairn s3' on a loopback port, credentials in s3.env) with the AWS SDK
// for Go, then with boto3 (test/s3/boto3_check.py, run with s3.env's
// variables as a user would). Buckets are the volume's top-level
// directories and objects its files, so every object is checked through
// the mount too. Covered:
// objects of 0 B, 1 B and 5 MiB + 1 B (multipart), user metadata and
// content type, ETags (MD5 of the bytes; of the parts' MD5s with "-2" for
// the multipart one), ranged GET, HEAD, copy, 1,000 keys listed with a
// delimiter, a prefix and continuation tokens, delete of many, a presigned
// URL (and a tampered one refused), a wrong secret refused, and a file
// written through the mount read over S3.
func TestS3Gateway(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s3")
	_, mp := startMounted(t, dir, "--s3=true")
	checkGatewayIdentity(t, dir)
	env := s3Env(t, dir)
	c := s3Client(env, env["AWS_SECRET_ACCESS_KEY"])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("photos")})
	must(t, err)
	if st, err := os.Stat(filepath.Join(mp, "photos")); err != nil || !st.IsDir() {
		t.Fatalf("bucket photos is not a directory of the volume: %v", err)
	}

	// Small objects, with metadata, through S3 and the mount.
	for _, size := range []int{0, 1, 4096} {
		key := fmt.Sprintf("small/%d.bin", size)
		data := bytes.Repeat([]byte{byte(size)}, size)
		out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("photos"), Key: aws.String(key), Body: bytes.NewReader(data),
			ContentType: aws.String("application/x-test"), Metadata: map[string]string{"owner": "ann"}})
		must(t, err)
		if got := strings.Trim(aws.ToString(out.ETag), `"`); got != md5Hex(data) {
			t.Fatalf("%s: ETag %s, want the MD5 %s", key, got, md5Hex(data))
		}
		head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("photos"), Key: aws.String(key)})
		must(t, err)
		if aws.ToInt64(head.ContentLength) != int64(size) || head.Metadata["owner"] != "ann" || aws.ToString(head.ContentType) != "application/x-test" {
			t.Fatalf("%s: head %d bytes, metadata %v, type %q", key, aws.ToInt64(head.ContentLength), head.Metadata, aws.ToString(head.ContentType))
		}
		checkObject(t, ctx, c, mp, "photos", key, data)
	}

	// 5 MiB + 1 B in two parts.
	big := make([]byte, 5<<20+1)
	for i := range big {
		big[i] = byte(i * 7)
	}
	mpu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("photos"), Key: aws.String("big.bin")})
	must(t, err)
	var parts []types.CompletedPart
	var sums []byte
	for i, p := range [][]byte{big[:5<<20], big[5<<20:]} {
		out, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("photos"), Key: aws.String("big.bin"), UploadId: mpu.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p)})
		must(t, err)
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(i + 1))})
		s := md5.Sum(p)
		sums = append(sums, s[:]...)
	}
	done, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("photos"), Key: aws.String("big.bin"),
		UploadId: mpu.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	must(t, err)
	if want := md5Hex(sums) + "-2"; strings.Trim(aws.ToString(done.ETag), `"`) != want {
		t.Fatalf("multipart ETag %s, want %s", aws.ToString(done.ETag), want)
	}
	checkObject(t, ctx, c, mp, "photos", "big.bin", big)

	// Ranged GET, copy.
	rg, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("photos"), Key: aws.String("big.bin"), Range: aws.String("bytes=1000-1999")})
	must(t, err)
	got, err := io.ReadAll(rg.Body)
	rg.Body.Close()
	must(t, err)
	if !bytes.Equal(got, big[1000:2000]) {
		t.Fatalf("ranged GET: %d bytes, not bytes 1000-1999", len(got))
	}
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("photos"), Key: aws.String("copy.bin"), CopySource: aws.String("photos/big.bin")})
	must(t, err)
	checkObject(t, ctx, c, mp, "photos", "copy.bin", big)

	// 1,000 keys in 10 prefixes.
	_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("many")})
	must(t, err)
	var keys []string
	for p := range 10 {
		for k := range 100 {
			keys = append(keys, fmt.Sprintf("p%d/k%03d", p, k))
		}
	}
	// Eight writers, as an S3 client's transfer pool would.
	errs := make(chan error, len(keys))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += 8 {
				_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("many"), Key: aws.String(keys[i]), Body: strings.NewReader(keys[i])})
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	sort.Strings(keys)
	listed, prefixes := listKeys(t, ctx, c, "many", "", "", 100)
	if strings.Join(listed, ",") != strings.Join(keys, ",") || len(prefixes) != 0 {
		t.Fatalf("listing 1,000 keys 100 at a time: %d keys (in order: %v), %d prefixes", len(listed), sort.StringsAreSorted(listed), len(prefixes))
	}
	listed, prefixes = listKeys(t, ctx, c, "many", "", "/", 3)
	if len(listed) != 0 || len(prefixes) != 10 || prefixes[0] != "p0/" || prefixes[9] != "p9/" {
		t.Fatalf("listing with delimiter /: keys %v, prefixes %v", listed, prefixes)
	}
	listed, _ = listKeys(t, ctx, c, "many", "p3/", "/", 30)
	if len(listed) != 100 || listed[0] != "p3/k000" || listed[99] != "p3/k099" {
		t.Fatalf("listing prefix p3/: %d keys", len(listed))
	}

	// Delete of many.
	var ids []types.ObjectIdentifier
	for _, k := range keys[:100] {
		ids = append(ids, types.ObjectIdentifier{Key: aws.String(k)})
	}
	del, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("many"), Delete: &types.Delete{Objects: ids}})
	must(t, err)
	if len(del.Deleted) != 100 || len(del.Errors) != 0 {
		t.Fatalf("delete of 100 keys: %d deleted, errors %v", len(del.Deleted), del.Errors)
	}
	if listed, _ = listKeys(t, ctx, c, "many", "", "", 1000); len(listed) != 900 {
		t.Fatalf("%d keys after deleting 100 of 1,000", len(listed))
	}
	if _, err := os.Stat(filepath.Join(mp, "many", keys[0])); !os.IsNotExist(err) {
		t.Fatalf("a deleted object is still a file: %v", err)
	}

	// Presigned URL; a tampered one; a wrong secret.
	ps, err := s3.NewPresignClient(c).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("photos"), Key: aws.String("small/4096.bin")},
		s3.WithPresignExpires(5*time.Minute))
	must(t, err)
	for _, tt := range []struct {
		url  string
		code int
	}{{ps.URL, 200}, {strings.Replace(ps.URL, "X-Amz-Signature=", "X-Amz-Signature=0", 1), 403}} {
		resp, err := http.Get(tt.url)
		must(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.code || (tt.code == 200 && len(body) != 4096) {
			t.Fatalf("presigned GET: status %d with %d bytes, want %d", resp.StatusCode, len(body), tt.code)
		}
	}
	if _, err := s3Client(env, "wrong-secret").ListBuckets(ctx, &s3.ListBucketsInput{}); err == nil ||
		!(strings.Contains(err.Error(), "SignatureDoesNotMatch") || strings.Contains(err.Error(), "AccessDenied")) {
		t.Fatalf("a wrong secret: %v, want SignatureDoesNotMatch", err)
	}

	// A file written through the mount is an object.
	fromMount := []byte("written through the mount")
	must(t, os.WriteFile(filepath.Join(mp, "photos", "from-mount.txt"), fromMount, 0o644))
	checkObject(t, ctx, c, mp, "photos", "from-mount.txt", fromMount)

	// boto3, with s3.env's variables in its environment.
	py := exec.CommandContext(ctx, "python3", filepath.Join("..", "s3", "boto3_check.py"))
	py.Env = cleanEnv()
	for k, v := range env {
		py.Env = append(py.Env, k+"="+v)
	}
	if out, err := py.CombinedOutput(); err != nil || !strings.Contains(string(out), "all checks passed") {
		t.Fatalf("boto3 checks (make test installs python3-boto3): %v\n%s", err, out)
	}

	checkVolumeBuckets(t, ctx, dir, env, big)
}

// checkGatewayIdentity: the gateway 'cairn up' started for the cluster in
// dir presents a client identity bound to the volume default, read-write,
// not the admin identity, and the masters list it. Everything TestS3Gateway
// then does through the gateway is done with that identity.
func checkGatewayIdentity(t *testing.T, dir string) {
	t.Helper()
	tlsDir := ""
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	must(t, err)
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 2 || args[1] != "s3" || !slices.Contains(args, filepath.Join(dir, "s3", "mnt")) {
			continue
		}
		if i := slices.Index(args, "--tls-dir"); i > 0 && i+1 < len(args) {
			tlsDir = args[i+1]
		}
	}
	if tlsDir == "" {
		t.Fatalf("found no gateway process of the cluster in %s with a --tls-dir", dir)
	}
	id, err := pki.Load(tlsDir)
	must(t, err)
	caps, err := capability.FromCert(id.Certificate())
	must(t, err)
	if kind := pki.KindOf(id.Certificate()); kind != pki.KindClient || caps.Volume != "default" || caps.VolumeID == 0 || caps.ReadOnly || caps.Subtree() {
		t.Fatalf("the gateway's identity in %s: kind %q, capabilities %+v; want a read-write client of volume default", tlsDir, kind, caps)
	}
	if list := mustCairn(t, "client", "list", "--data-dir", dir); !strings.Contains(list, "cairn-up-s3") || !strings.Contains(list, "volume default, read-write") {
		t.Fatalf("client list does not show the gateway's identity:\n%s", list)
	}
}

// checkVolumeBuckets runs a second gateway, `cairn s3 --buckets volumes`,
// on the cluster in dir, where every volume is a bucket: the volume
// 'default' (whose directory photos holds big.bin, put through the first
// gateway) is a bucket, a bucket created over S3 is a volume, a volume
// created with the CLI is a bucket, a copy crosses volumes, an empty
// bucket's deletion deletes its volume and a non-empty one is refused.
func checkVolumeBuckets(t *testing.T, ctx context.Context, dir string, env map[string]string, big []byte) {
	addr := freeAddr(t)
	logf, err := os.Create(filepath.Join(dir, "s3-volumes.log"))
	must(t, err)
	defer logf.Close()
	mounts := filepath.Join(dir, "s3-volumes")
	must(t, os.Mkdir(mounts, 0o755))
	gw := exec.Command(cairnBin, "s3", "--buckets", "volumes", "--data-dir", dir, "--listen", addr, "--mount-dir", mounts)
	gw.Env = append(cleanEnv(), "AWS_ACCESS_KEY_ID=volumes-key", "AWS_SECRET_ACCESS_KEY=volumes-secret")
	gw.Stdout, gw.Stderr = logf, logf
	must(t, gw.Start())
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = gw.Process.Signal(syscall.SIGTERM)
			_ = gw.Wait()
		}
	}
	defer stop()
	log := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("cairn s3 --buckets volumes not serving after 30s:\n%s", log())
		}
	}
	c := s3Client(map[string]string{"AWS_REGION": env["AWS_REGION"], "AWS_ENDPOINT_URL": "http://" + addr,
		"AWS_ACCESS_KEY_ID": "volumes-key"}, "volumes-secret")
	buckets := func() []string {
		out, err := c.ListBuckets(ctx, &s3.ListBucketsInput{})
		must(t, err)
		var names []string
		for _, b := range out.Buckets {
			names = append(names, aws.ToString(b.Name))
		}
		return names
	}
	volumes := func() string { return mustCairn(t, "volume", "list", "--data-dir", dir) }
	get := func(bucket, key string) []byte {
		t.Helper()
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("GET %s/%s: %v\n%s", bucket, key, err, log())
		}
		defer out.Body.Close()
		b, err := io.ReadAll(out.Body)
		must(t, err)
		return b
	}

	if got := buckets(); !slices.Equal(got, []string{"default"}) {
		t.Fatalf("buckets %v, want the volume default", got)
	}
	_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("vb-one")})
	must(t, err)
	if !strings.Contains(volumes(), "vb-one") {
		t.Fatalf("bucket vb-one made no volume:\n%s", volumes())
	}
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("vb-one")}); err == nil || !strings.Contains(err.Error(), "BucketAlreadyOwnedByYou") {
		t.Fatalf("bucket vb-one created twice: %v", err)
	}
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("vb-one"), Key: aws.String("dir/big.bin"), CopySource: aws.String("default/photos/big.bin")})
	must(t, err)
	if got := get("vb-one", "dir/big.bin"); !bytes.Equal(got, big) {
		t.Fatalf("big.bin copied from volume default to vb-one: %d bytes, not the %d put", len(got), len(big))
	}
	if got := get("default", "photos/big.bin"); !bytes.Equal(got, big) {
		t.Fatalf("photos/big.bin of volume default: %d bytes, not the %d put through the directory gateway", len(got), len(big))
	}

	mustCairn(t, "volume", "create", "vb-two", "--data-dir", dir)
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("vb-two"), Key: aws.String("k"), Body: strings.NewReader("v")})
	must(t, err)
	if got := get("vb-two", "k"); string(got) != "v" {
		t.Fatalf("vb-two/k: %q", got)
	}
	if got := buckets(); !slices.Equal(got, []string{"default", "vb-one", "vb-two"}) {
		t.Fatalf("buckets %v, want default, vb-one, vb-two", got)
	}

	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("vb-one")}); err == nil || !strings.Contains(err.Error(), "BucketNotEmpty") {
		t.Fatalf("non-empty bucket deleted: %v", err)
	}
	_, err = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("vb-one"), Key: aws.String("dir/big.bin")})
	must(t, err)
	_, err = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("vb-one")})
	if err != nil {
		t.Fatalf("delete empty bucket vb-one: %v\n%s", err, log())
	}
	if strings.Contains(volumes(), "vb-one") {
		t.Fatalf("volume vb-one outlived its bucket:\n%s", volumes())
	}
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("vb-one")}); err == nil {
		t.Fatal("HEAD of the deleted bucket vb-one succeeded")
	}
	if got := buckets(); !slices.Equal(got, []string{"default", "vb-two"}) {
		t.Fatalf("buckets %v after deleting vb-one, want default, vb-two", got)
	}
	stop()
	b, err := os.ReadFile("/proc/self/mounts")
	must(t, err)
	if strings.Contains(string(b), mounts) {
		t.Fatalf("the volumes gateway left mounts under %s:\n%s\ngateway log:\n%s", mounts, b, log())
	}
}

// checkObject reads key over S3 and through the mount and compares both
// with want.
func checkObject(t *testing.T, ctx context.Context, c *s3.Client, mp, bucket, key string, want []byte) {
	t.Helper()
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	must(t, err)
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	must(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("GET %s/%s: %d bytes, want %d (same: %v)", bucket, key, len(got), len(want), bytes.Equal(got, want))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		file, err := os.ReadFile(filepath.Join(mp, bucket, key))
		if err == nil && bytes.Equal(file, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s through the mount: %d bytes, %v; want the object's %d", bucket, key, len(file), err, len(want))
		}
		time.Sleep(200 * time.Millisecond) // the mount's attribute cache
	}
}

// listKeys pages through ListObjectsV2 with continuation tokens.
func listKeys(t *testing.T, ctx context.Context, c *s3.Client, bucket, prefix, delim string, page int32) (keys, prefixes []string) {
	t.Helper()
	var token *string
	for range 10_000 {
		out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix),
			Delimiter: aws.String(delim), MaxKeys: aws.Int32(page), ContinuationToken: token})
		must(t, err)
		for _, o := range out.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
		for _, p := range out.CommonPrefixes {
			prefixes = append(prefixes, aws.ToString(p.Prefix))
		}
		if !aws.ToBool(out.IsTruncated) {
			return keys, prefixes
		}
		token = out.NextContinuationToken
	}
	t.Fatal("listing never ended")
	return nil, nil
}
