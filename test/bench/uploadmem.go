package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"mime/multipart"
	"net/http"
	"time"
)

// uploadMemoryTarget bounds an upload's RSS growth as a share of its body.
const uploadMemoryTarget = 0.25

// uploadMemory sends files of size random bytes in one POST /upload to a kiln that has
// served nothing yet, and returns how far its RSS rose above where it stood before, with
// the body's size, both in MiB. A kiln that spools uploads to disk rises by a small part
// of the body; one that holds them rises by the whole body or more.
func uploadMemory(ctx context.Context, k *client, pid, files, size int) (growthMB, bodyMB float64, err error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	data := make([]byte, size)
	for i := range files {
		_, _ = rand.Read(data)
		w, err := mw.CreateFormFile("files", fmt.Sprintf("part-%d.bin", i))
		if err != nil {
			return 0, 0, err
		}
		if _, err := w.Write(data); err != nil {
			return 0, 0, err
		}
	}
	if err := mw.Close(); err != nil {
		return 0, 0, err
	}
	time.Sleep(2 * time.Second) // the warm-ups' garbage settles
	before, err := rssKB(pid)
	if err != nil {
		return 0, 0, err
	}
	rss := startRSS(pid)
	bodyMB = float64(body.Len()) / (1 << 20)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.url+"/upload", &body)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	code, raw, err := k.do(req)
	peak := rss.Stop()
	if err != nil {
		return 0, 0, err
	}
	if code != http.StatusOK {
		return 0, 0, fmt.Errorf("upload answered %d: %.200s", code, raw)
	}
	return round(max(peak-float64(before)/1024, 0), 1), round(bodyMB, 1), nil
}
