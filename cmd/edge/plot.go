package main

import (
	"fmt"
	"image/color"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// palette gives each series a distinct, colour-blind-friendly colour.
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255}, color.RGBA{213, 94, 0, 255}, color.RGBA{0, 158, 115, 255},
	color.RGBA{204, 121, 167, 255}, color.RGBA{230, 159, 0, 255}, color.RGBA{86, 180, 233, 255}, color.RGBA{0, 0, 0, 255},
}

// series is one line of a chart.
type series struct {
	name string
	xy   plotter.XYs
}

// drawLines writes a line chart with points to path (PNG by extension),
// with a logarithmic x or y axis if asked.
func drawLines(path, title, xlabel, ylabel string, logX, logY bool, ss []series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	for i, s := range ss {
		if len(s.xy) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(s.xy)
		if err != nil {
			return fmt.Errorf("plot %s: %w", s.name, err)
		}
		c := palette[i%len(palette)]
		l.Color, pts.Color = c, c
		l.Width = vg.Points(1.5)
		p.Add(l, pts)
		p.Legend.Add(s.name, l, pts)
	}
	p.Legend.Top = true
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func plotSweep(path, name string, points []sweepPoint) error {
	by := map[string]plotter.XYs{}
	var order []string
	for _, pt := range points {
		if _, ok := by[pt.policy]; !ok {
			order = append(order, pt.policy)
		}
		by[pt.policy] = append(by[pt.policy], plotter.XY{X: pt.value, Y: pt.res.CostVsOpt})
	}
	var ss []series
	for _, pol := range order {
		xy := by[pol]
		sort.Slice(xy, func(i, j int) bool { return xy[i].X < xy[j].X })
		ss = append(ss, series{pol, xy})
	}
	xlabel := "update interval U (insertions between advertisements)"
	if name == "bpe" {
		xlabel = "indicator size (bits per element)"
	}
	return drawLines(path, "cost relative to the oracle", xlabel, "cost / opt", name == "update-interval", false, ss)
}
