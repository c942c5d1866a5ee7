package placement

// bytesPerGiB scales free space so that weights read as GiB.
const bytesPerGiB = 1 << 30

// Weight returns the straw2 weight of c, following the utilization-based
// placement of CFS §2.3.1:
//
//	Weight = freeGiB × (1 − diskUtil) × (1 − MemUtil)
//	freeGiB  = (CapacityBytes − UsedBytes) / 2^30
//	diskUtil = UsedBytes / CapacityBytes
//
// It guarantees: the result is finite and ≥ 0; it is 0, so the node is
// never chosen, when the node is full (UsedBytes ≥ CapacityBytes, including
// CapacityBytes = 0), when its memory is exhausted (MemUtil ≥ 1), or when
// MemUtil is NaN or negative or Partitions is negative (a corrupt report
// must not attract data); otherwise it is > 0. For a fixed capacity it
// decreases as UsedBytes grows, and for fixed disk numbers it decreases as
// MemUtil grows (strictly, beyond float64 resolution). Partitions does not enter the
// formula: the space and memory a partition uses already show in the
// utilizations.
func Weight(c Candidate) float64 {
	if c.CapacityBytes == 0 || c.UsedBytes >= c.CapacityBytes {
		return 0
	}
	// Written so that NaN fails the test.
	if !(c.MemUtil >= 0 && c.MemUtil < 1) || c.Partitions < 0 {
		return 0
	}
	free := float64(c.CapacityBytes - c.UsedBytes)
	// free/capacity is 1 − diskUtil computed without cancellation.
	return (free / bytesPerGiB) * (free / float64(c.CapacityBytes)) * (1 - c.MemUtil)
}
