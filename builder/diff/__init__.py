"""`imgbuild diff`: two revisions of the spec (specdiff), two images (imagediff), and their reports."""
