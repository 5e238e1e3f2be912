// Package gaugefunc is a component-base custom collector for one gauge read
// at scrape time, for values a package keeps up to date whether or not its
// metrics are registered (component-base metrics record nothing before
// registration).
package gaugefunc

import "k8s.io/component-base/metrics"

// Collector reports one ALPHA gauge whose value is read at every scrape.
type Collector struct {
	metrics.BaseStableCollector
	desc  *metrics.Desc
	value func() float64
}

var _ metrics.StableCollector = (*Collector)(nil)

// New returns a collector of the gauge fqName, reporting value(), which must
// be safe for concurrent use.
func New(fqName, help string, value func() float64) *Collector {
	return &Collector{
		desc:  metrics.NewDesc(fqName, help, nil, nil, metrics.ALPHA, ""),
		value: value,
	}
}

// DescribeWithStability implements metrics.StableCollector.
func (c *Collector) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- c.desc }

// CollectWithStability implements metrics.StableCollector.
func (c *Collector) CollectWithStability(ch chan<- metrics.Metric) {
	ch <- metrics.NewLazyConstMetric(c.desc, metrics.GaugeValue, c.value())
}
