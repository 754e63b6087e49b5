"""Loading: stacks.yaml and the layer kinds (shipped and the site's) into frozen, validated models."""
