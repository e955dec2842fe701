"""Image-caption corpora: the embedded scene world and real datasets (COCO, Karpathy, Flickr8k), their held-out anchors and benchmark-image exclusions."""
