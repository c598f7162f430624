package session

import (
	"context"
	"fmt"

	"github.com/kilnsh/kiln"
)

// quotaPage is how many of an owner's sessions storedBytes reads at once.
const quotaPage = 200

// storedBytes is what the sessions c owns hold in the store: their state blobs and
// their files. It reads them all, so it is only called when a quota is set.
func (s *Service) storedBytes(ctx context.Context, c Caller) (int64, error) {
	var total int64
	for offset := 0; ; offset += quotaPage {
		page, err := s.store.OwnerSessions(ctx, c.owner(), offset, quotaPage)
		if err != nil {
			return 0, fmt.Errorf("storage quota: %w", err)
		}
		for _, sess := range page {
			total += sess.StateSize
			files, err := s.store.Files(ctx, sess.ID)
			if err != nil {
				continue // swept since it was listed
			}
			for _, f := range files {
				total += f.Size
			}
		}
		if len(page) < quotaPage {
			return total, nil
		}
	}
}

// checkQuota refuses to store adding more bytes for c (less freed, what they replace)
// when that would take c's stored bytes past Limits.MaxStoredBytes.
func (s *Service) checkQuota(ctx context.Context, c Caller, adding, freed int64) error {
	limit := s.limits.MaxStoredBytes
	if limit <= 0 {
		return nil
	}
	used, err := s.storedBytes(ctx, c)
	if err != nil {
		return err
	}
	if used-freed+adding <= limit {
		return nil
	}
	return s.refuse(&kiln.Error{Code: kiln.CodeTooLarge, Quota: kiln.QuotaStorage, Message: fmt.Sprintf(
		"storage quota exceeded: QUOTA_STORAGE_MB is %s for each caller, which stores %s already and would add %s; delete files or sessions to make room",
		mb(limit), mb(used), mb(adding-freed))})
}

// checkRoom refuses a new session to a caller whose stored bytes have reached
// Limits.MaxStoredBytes.
func (s *Service) checkRoom(ctx context.Context, c Caller) error {
	limit := s.limits.MaxStoredBytes
	if limit <= 0 {
		return nil
	}
	used, err := s.storedBytes(ctx, c)
	if err != nil || used < limit {
		return err
	}
	return s.refuse(&kiln.Error{Code: kiln.CodeTooLarge, Quota: kiln.QuotaStorage, Message: fmt.Sprintf(
		"storage quota reached: QUOTA_STORAGE_MB is %s for each caller, which stores %s already; delete files or sessions before starting another",
		mb(limit), mb(used))})
}

// mb writes a byte count in MB, as the quota is set.
func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }
