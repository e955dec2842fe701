"""DVC stage `corpus`: the image-caption manifest from the scene world or a real corpus (COCO, Karpathy, Flickr8k)."""

from concrete_jungle.experiment import build_corpus, run_stage

if __name__ == "__main__":
    run_stage(__doc__, build_corpus)
