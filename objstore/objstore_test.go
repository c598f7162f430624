package objstore_test

import (
	"sync"
	"testing"

	"github.com/kilnsh/kiln/objstore"
	"github.com/kilnsh/kiln/test/kilntest"
)

// Replicas that start together each open the bucket, which none of them finds: one
// creates it, and the others find it made, not an error.
func TestOpenRacesToCreate(t *testing.T) {
	s3 := kilntest.StartS3(t)
	cfg := objstore.Config{Endpoint: s3.Endpoint, Bucket: "raced", Region: "us-east-1",
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, PathStyle: true}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = objstore.Open(t.Context(), cfg)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("opener %d: %v", i, err)
		}
	}
	cfg.SecretKey = "not-the-secret"
	if _, err := objstore.Open(t.Context(), cfg); err == nil {
		t.Error("a wrong secret opened the bucket")
	}
}
