// Package objstore keeps the bytes of files and state blobs in an S3-compatible object
// store (AWS S3, MinIO, versitygw, Ceph...), for the Redis store, which keeps only their
// metadata then. It is the only importer of the S3 client (minio-go).
package objstore

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kilnsh/kiln/store"
)

// Config names the bucket and how to reach it.
type Config struct {
	// Endpoint is the server's URL (http://host:9000, https://s3.eu-west-1.amazonaws.com).
	Endpoint string
	Bucket   string
	Region   string
	// AccessKey and SecretKey are the credentials; empty means the environment's
	// (AWS_ACCESS_KEY_ID and the rest, or an instance or Pod role).
	AccessKey, SecretKey string
	// PathStyle forces http://host/bucket/key addressing; otherwise the client picks
	// virtual-host style for AWS and path style for other servers.
	PathStyle bool
}

// Bucket is a bucket of an S3-compatible server.
type Bucket struct {
	client *minio.Client
	bucket string
}

var _ store.Objects = (*Bucket)(nil)

// Open connects to the bucket, creating it when it does not exist, and checks that it
// answers.
func Open(ctx context.Context, cfg Config) (*Bucket, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("S3 endpoint %q is not an http(s):// URL", cfg.Endpoint)
	}
	creds := credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{}, &credentials.IAM{},
	})
	if cfg.AccessKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds: creds, Secure: u.Scheme == "https", Region: cfg.Region, BucketLookup: lookup,
		// A server that is restarting is retried within the request's context.
		MaxRetries: 5,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 client: %w", err)
	}
	b := &Bucket{client: client, bucket: cfg.Bucket}
	exists, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("S3 bucket %s at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	if !exists {
		// Replicas that start together race to create it: one that lost finds it made.
		err := client.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region})
		if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			if exists, _ = client.BucketExists(ctx, cfg.Bucket); exists {
				err = nil
			}
		}
		if err != nil {
			return nil, fmt.Errorf("S3 bucket %s at %s does not exist, and creating it failed: %w", cfg.Bucket, cfg.Endpoint, err)
		}
	}
	return b, nil
}

// Put implements store.Objects. The content streams to the bucket: one PUT up to
// 64 MiB, parts beyond (read from content where it can be read at an offset, such as a
// spooled upload, or through one part's buffer).
func (b *Bucket) Put(ctx context.Context, key string, content io.Reader, size int64) error {
	_, err := b.client.PutObject(ctx, b.bucket, key, content, size,
		minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: size < 64<<20})
	if err != nil {
		return fmt.Errorf("S3 put %s: %w", key, err)
	}
	return nil
}

// Get implements store.Objects.
func (b *Bucket) Get(ctx context.Context, key string) ([]byte, error) {
	obj, err := b.client.GetObject(ctx, b.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, getError(key, err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		return nil, getError(key, err)
	}
	return data, nil
}

// Open implements store.Objects: the object's bytes stream from the server as they are
// read. It asks for the object's metadata first, so that a missing one is an error here
// and not on the first read.
func (b *Bucket) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := b.client.GetObject(ctx, b.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, getError(key, err)
	}
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		return nil, getError(key, err)
	}
	return obj, nil
}

// getError is a failed read of key: store.ErrNotFound when the bucket has no such key.
func getError(key string, err error) error {
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		err = store.ErrNotFound
	}
	return fmt.Errorf("S3 get %s: %w", key, err)
}

// Delete implements store.Objects. A key that does not exist is not an error.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	err := b.client.RemoveObject(ctx, b.bucket, key, minio.RemoveObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != "NoSuchKey" {
		return fmt.Errorf("S3 delete %s: %w", key, err)
	}
	return nil
}

// List implements store.Objects.
func (b *Bucket) List(ctx context.Context, prefix string, olderThan time.Time) ([]string, error) {
	var keys []string
	for obj := range b.client.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return keys, fmt.Errorf("S3 list %s: %w", prefix, obj.Err)
		}
		if obj.LastModified.Before(olderThan) {
			keys = append(keys, obj.Key)
		}
	}
	return keys, nil
}

// Ping checks that the bucket answers.
func (b *Bucket) Ping(ctx context.Context) error {
	if _, err := b.client.BucketExists(ctx, b.bucket); err != nil {
		return fmt.Errorf("S3 bucket %s: %w", b.bucket, err)
	}
	return nil
}
