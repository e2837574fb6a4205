#!/usr/bin/env python3
"""Pillow as the independent reference for tune's image tests (tests/data/test_images.cpp).

    image_reference.py decode IN RAW             IN decoded by Pillow, converted to RGB, written as raw bytes
                                                 (H*W*3, row-major); prints "WIDTH HEIGHT"
    image_reference.py gradient OUT WIDTH HEIGHT  a non-square RGB test image saved by Pillow (format from OUT's
                                                 extension): red = x, green = y, blue = (x * 7 + y * 3) % 256
    image_reference.py resize_crop IN SIZE RAW   torchvision's Resize(SIZE) + CenterCrop(SIZE) on a PIL image,
                                                 spelled out with Pillow (torchvision itself is not installed):
                                                 short side to SIZE, long side int(SIZE * long / short), bilinear;
                                                 crop offsets round((H - SIZE) / 2); raw RGB bytes as for decode
    image_reference.py bucket_resize_crop IN HEIGHT WIDTH RAW
                                                 the official Sana multi-scale transform (SanaWebDatasetMS):
                                                 Resize to cover HEIGHT x WIDTH (the side with the larger scale
                                                 exact, the other int(side * target / other)), bicubic, then
                                                 CenterCrop((HEIGHT, WIDTH)); raw RGB bytes as for decode

Pillow comes with diffusers (scripts/requirements.txt). Exit status 3 when Pillow is missing, so a test can skip.
"""
import sys

try:
    from PIL import Image
except ImportError:
    print("Pillow is not installed", file=sys.stderr)
    sys.exit(3)


def decode(path, raw):
    image = Image.open(path).convert("RGB")
    with open(raw, "wb") as out:
        out.write(image.tobytes())
    print(image.width, image.height)


def gradient(path, width, height):
    image = Image.new("RGB", (width, height))
    image.putdata([(x % 256, y % 256, (x * 7 + y * 3) % 256) for y in range(height) for x in range(width)])
    image.save(path)


def center_crop_to_raw(image, height, width, raw):
    """torchvision's CenterCrop (offsets round((H - h) / 2), Python's round), written as decode writes."""
    top = int(round((image.height - height) / 2.0))
    left = int(round((image.width - width) / 2.0))
    image = image.crop((left, top, left + width, top + height))
    with open(raw, "wb") as out:
        out.write(image.tobytes())
    print(image.width, image.height)


def resize_crop(path, size, raw):
    image = Image.open(path).convert("RGB")
    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    new_width, new_height = (new_short, new_long) if width <= height else (new_long, new_short)
    center_crop_to_raw(image.resize((new_width, new_height), Image.BILINEAR), size, size, raw)


def bucket_resize_crop(path, height, width, raw):
    image = Image.open(path).convert("RGB")
    ori_w, ori_h = image.size
    if height / ori_h > width / ori_w:
        new_h, new_w = height, int(ori_w * height / ori_h)
    else:
        new_h, new_w = int(ori_h * width / ori_w), width
    center_crop_to_raw(image.resize((new_w, new_h), Image.BICUBIC), height, width, raw)


def main(argv):
    if len(argv) == 3 and argv[0] == "decode":
        decode(argv[1], argv[2])
    elif len(argv) == 4 and argv[0] == "gradient":
        gradient(argv[1], int(argv[2]), int(argv[3]))
    elif len(argv) == 4 and argv[0] == "resize_crop":
        resize_crop(argv[1], int(argv[2]), argv[3])
    elif len(argv) == 5 and argv[0] == "bucket_resize_crop":
        bucket_resize_crop(argv[1], int(argv[2]), int(argv[3]), argv[4])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
