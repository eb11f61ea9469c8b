package main

import (
	"fmt"
	"image/color"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotRows draws each configuration's mean miss latency against the
// indicator advertisement interval (one line per configuration), or, with a
// single interval, one bar per configuration with its p99 above it.
func plotRows(path, workload string, rows []row) error {
	p := plot.New()
	p.Title.Text = "two regions, " + workload + ": latency of misses"
	p.Y.Label.Text = "ms"
	p.Add(plotter.NewGrid())
	var configs, advs []string
	for _, r := range rows {
		if !slices.Contains(configs, r.Config) {
			configs = append(configs, r.Config)
		}
		if !slices.Contains(advs, r.Advertise) {
			advs = append(advs, r.Advertise)
		}
	}
	palette := []color.Color{color.RGBA{0, 114, 178, 255}, color.RGBA{213, 94, 0, 255}, color.RGBA{0, 158, 115, 255},
		color.RGBA{204, 121, 167, 255}, color.RGBA{230, 159, 0, 255}, color.RGBA{86, 180, 233, 255}, color.RGBA{0, 0, 0, 255}}
	if len(advs) > 1 {
		p.X.Label.Text = "indicator advertisement interval (s)"
		for i, cfg := range configs {
			var xy plotter.XYs
			for _, r := range rows {
				if r.Config != cfg {
					continue
				}
				d, err := time.ParseDuration(r.Advertise)
				if err != nil {
					return fmt.Errorf("plot: advertisement interval %q: %w", r.Advertise, err)
				}
				xy = append(xy, plotter.XY{X: d.Seconds(), Y: r.MissMeanMs})
			}
			l, pts, err := plotter.NewLinePoints(xy)
			if err != nil {
				return err
			}
			c := palette[i%len(palette)]
			l.Color, pts.Color, l.Width = c, c, vg.Points(1.5)
			p.Add(l, pts)
			p.Legend.Add(cfg+" (mean)", l, pts)
		}
	} else {
		means := make(plotter.Values, len(rows))
		p99s := make(plotter.Values, len(rows))
		names := make([]string, len(rows))
		for i, r := range rows {
			means[i], p99s[i], names[i] = r.MissMeanMs, r.MissP99Ms, r.Config
		}
		w := vg.Points(14)
		for j, vs := range []plotter.Values{means, p99s} {
			b, err := plotter.NewBarChart(vs, w)
			if err != nil {
				return err
			}
			b.Color, b.LineStyle.Width = palette[j], 0
			b.Offset = vg.Length(2*j-1) * w / 2
			p.Add(b)
			p.Legend.Add([]string{"mean", "p99"}[j], b)
		}
		p.NominalX(names...)
		p.Legend.Left = true // above the first bars, clear of the p99s
	}
	p.Y.Min = 0 // differences of a few ms shown against the whole latency
	p.Legend.Top = len(advs) == 1
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}
