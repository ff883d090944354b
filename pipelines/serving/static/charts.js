// Chart.js charts of the activity views (the UMD build defines window.Chart).
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

export function drawStacked(canvas, labels, series) {
  const existing = window.Chart.getChart(canvas);
  if (existing) existing.destroy();
  const datasets = Object.entries(series).map(([name, values], index) => ({
    label: name,
    data: values,
    backgroundColor: PALETTE[index % PALETTE.length],
  }));
  return new window.Chart(canvas, {
    type: "bar",
    data: { labels, datasets },
    options: {
      animation: false,
      maintainAspectRatio: false,
      responsive: true,
      scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 } } },
    },
  });
}
