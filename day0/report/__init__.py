"""The run report: `write` (report.md and report.html in the run's folder), `scorecard` (the Day-0
scorecard), `html` (the self-contained page), `reuse` (what a reused step stands on) and `text` (what
may become an image, and how other text stays inert). Import each name from its module."""
