package console

import (
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Totals are the counters the console charts, summed over the cluster's
// nodes at one moment.
type Totals struct {
	MetaRequests float64 // cairn_meta_client_requests_total
	DataRequests float64 // cairn_data_requests_total
	BytesIn      float64 // cairn_data_bytes_in_total: written, forwarding included
	BytesOut     float64 // cairn_data_bytes_out_total: read
}

// charted maps the metrics the console sums to their Totals field.
var charted = map[string]func(*Totals) *float64{
	"cairn_meta_client_requests_total": func(t *Totals) *float64 { return &t.MetaRequests },
	"cairn_data_requests_total":        func(t *Totals) *float64 { return &t.DataRequests },
	"cairn_data_bytes_in_total":        func(t *Totals) *float64 { return &t.BytesIn },
	"cairn_data_bytes_out_total":       func(t *Totals) *float64 { return &t.BytesOut },
}

// addExposition adds the charted counters of one Prometheus text
// exposition (a node's /metrics) to t.
func (t *Totals) addExposition(r io.Reader) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return err
	}
	for name, fam := range fams {
		field, ok := charted[name]
		if !ok || fam.GetType() != dto.MetricType_COUNTER {
			continue
		}
		for _, m := range fam.GetMetric() {
			*field(t) += m.GetCounter().GetValue()
		}
	}
	return nil
}

// Sample is one point of the console's charts: per-second rates over the
// interval that ends at UnixMs.
type Sample struct {
	UnixMs         int64   `json:"unix_ms"`
	MetaOpsPerSec  float64 `json:"meta_ops_per_sec"`
	DataOpsPerSec  float64 `json:"data_ops_per_sec"`
	BytesInPerSec  float64 `json:"bytes_in_per_sec"`
	BytesOutPerSec float64 `json:"bytes_out_per_sec"`
}

// rate is the sample between two totals taken seconds apart. A counter
// that went down (a node restarted, or left) counts as 0 for the interval.
func rate(prev, cur Totals, seconds float64, nowMs int64) Sample {
	per := func(a, b float64) float64 {
		if seconds <= 0 || b < a {
			return 0
		}
		return (b - a) / seconds
	}
	return Sample{
		UnixMs:         nowMs,
		MetaOpsPerSec:  per(prev.MetaRequests, cur.MetaRequests),
		DataOpsPerSec:  per(prev.DataRequests, cur.DataRequests),
		BytesInPerSec:  per(prev.BytesIn, cur.BytesIn),
		BytesOutPerSec: per(prev.BytesOut, cur.BytesOut),
	}
}
