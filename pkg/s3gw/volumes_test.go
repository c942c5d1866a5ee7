package s3gw

import (
	"errors"
	"testing"

	"github.com/versity/versitygw/s3err"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestValidBucket(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"default", true},
		{"vb-one", true},
		{"a.b.c", true},
		{"ab", false},          // S3: 3 to 63 characters
		{"Photos", false},      // S3: no capitals (a volume may have them)
		{"my_vol", false},      // S3: no underscore
		{"..", false},          // a path element that climbs
		{"a/b", false},         // two path elements
		{"-abc", false},        // must start with a letter or digit
		{"192.168.1.1", false}, // S3: not an IP address
		{string(make([]byte, 64)), false},
	} {
		if got := validBucket(tt.name); got != tt.ok {
			t.Errorf("validBucket(%q) = %v, want %v", tt.name, got, tt.ok)
		}
	}
}

func TestMasterErr(t *testing.T) {
	for _, tt := range []struct {
		code codes.Code
		want s3err.ErrorCode
		s3   bool
	}{
		{codes.PermissionDenied, s3err.ErrAccessDenied, true},
		{codes.Unauthenticated, s3err.ErrAccessDenied, true},
		{codes.NotFound, s3err.ErrNoSuchBucket, true},
		{codes.AlreadyExists, s3err.ErrBucketAlreadyOwnedByYou, true},
		{codes.InvalidArgument, s3err.ErrInvalidBucketName, true},
		{codes.Unavailable, 0, false},
	} {
		err := masterErr(status.Error(tt.code, "x"), "b1")
		var be s3err.BucketError
		var ae s3err.APIError
		switch {
		case !tt.s3:
			if errors.As(err, &be) || errors.As(err, &ae) {
				t.Errorf("%v: %v, want an internal error", tt.code, err)
			}
		case errors.As(err, &be):
			if be.APIError != s3err.GetAPIError(tt.want) {
				t.Errorf("%v: %v, want %v", tt.code, err, s3err.GetAPIError(tt.want))
			}
		case errors.As(err, &ae):
			if ae != s3err.GetAPIError(tt.want) {
				t.Errorf("%v: %v, want %v", tt.code, err, s3err.GetAPIError(tt.want))
			}
		default:
			t.Errorf("%v: %v, not an S3 error", tt.code, err)
		}
	}
}
