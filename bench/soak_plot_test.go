package bench

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// soakFaultColors colour the vertical lines that mark faults.
var soakFaultColors = map[string]color.Color{
	"stall":   color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"freeze":  colorPeer,
	"sigstop": color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	"kill":    color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// soakPanels are the plot's panels: a quantity against time.
var soakPanels = []struct {
	title string
	get   func(prev, cur soakSample) float64 // negative: not read
}{
	{"heap (MiB, after GC)", func(_, c soakSample) float64 { return float64(c.heap) / (1 << 20) }},
	{"goroutines", func(_, c soakSample) float64 { return float64(c.goroutines) }},
	{"open FDs", func(_, c soakSample) float64 { return float64(c.fds) }},
	{"server connections", func(_, c soakSample) float64 { return float64(c.conns) }},
	{"store records", func(_, c soakSample) float64 { return float64(c.store) }},
	{"rounds ok / s", func(p, c soakSample) float64 { return float64(c.ok-p.ok) / (c.at - p.at).Seconds() }},
}

// plot draws the samples, one panel per quantity against time, with the
// faults as vertical lines, into a PNG file.
func (s *soakSampler) plot(file, title string) error {
	s.mu.Lock()
	samples := append([]soakSample(nil), s.all...)
	marks := append([]soakMark(nil), s.marks...)
	s.mu.Unlock()

	const w, h = 12 * vg.Inch, 6.5 * vg.Inch
	img, body := titledCanvas(w, h, 100, title)
	tiles := draw.Tiles{Rows: 2, Cols: 3, PadX: 16, PadY: 16}
	for i, p := range soakPanels {
		pl := plot.New()
		pl.Title.Text = p.title
		pl.X.Label.Text = "seconds"
		pl.Add(plotter.NewGrid())
		var xys plotter.XYs
		var prev soakSample
		for _, smp := range samples {
			if v := p.get(prev, smp); v >= 0 {
				xys = append(xys, plotter.XY{X: smp.at.Seconds(), Y: v})
			}
			prev = smp
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("%s: %w", p.title, err)
		}
		l.Color, l.Width = colorOurs, 2
		pl.Add(l)
		pl.X.Min, pl.Y.Min = 0, 0
		pl.Y.Max *= 1.25 // room for the legend
		seen := make(map[string]bool)
		for _, m := range marks {
			v, err := plotter.NewLine(plotter.XYs{{X: m.at.Seconds(), Y: 0}, {X: m.at.Seconds(), Y: pl.Y.Max}})
			if err != nil {
				return err
			}
			v.Color, v.Width = soakFaultColors[m.kind], 1
			pl.Add(v)
			if i == 0 && !seen[m.kind] {
				seen[m.kind] = true
				pl.Legend.Add(m.kind, v)
			}
		}
		pl.Legend.Top = true
		pl.Draw(tiles.At(body, i%3, i/3))
	}
	return writePNG(file, img)
}
