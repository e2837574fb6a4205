#!/usr/bin/env python3
"""Synthetic class-conditional video data for the Latte recipe: a bright square (or disc) moving across a dark
background, the class being the direction of motion (0 right, 1 left, 2 down, 3 up).

Writes UCF-101 layout, one folder per class (names sort in class order), one folder of PNG frames per video:
    <out>/0_right/v0000/frame_00000.png ... frame_00015.png
plus <out>/manifest.json describing every video (class, start position, speed, colours). With --mp4-per-class K
the first K videos of each class are also encoded as <out>/<class>/<id>.mp4 with the ffmpeg CLI (when installed),
so the reader can be tested on real video files. Plain python3 standard library; PNGs are written with zlib+struct.

    python3 scripts/make_moving_shapes.py --out data/shapes --videos-per-class 64 --num-frames 16 --size 32
"""
import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import zlib

CLASS_NAMES = ["0_right", "1_left", "2_down", "3_up"]
DIRECTIONS = [(1, 0), (-1, 0), (0, 1), (0, -1)]  # (dx, dy) per frame, y grows downward
CLASS_COLOURS = [(255, 64, 64), (64, 255, 64), (64, 128, 255), (255, 255, 64)]  # --colours class: red green blue yellow


def write_png(path, width, height, rgb_rows):
    """rgb_rows: `height` bytes objects of width*3 bytes each. 8-bit truecolour, no interlace, filter 0."""

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes(row) for row in rgb_rows)
    png = b"\x89PNG\r\n\x1a\n"
    png += chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 6))
    png += chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def render_frame(size, shape, side, x, y, colour, background):
    """One frame as rows of RGB bytes: the shape's top-left corner at (x, y), side `side` pixels."""
    rows = []
    radius = side / 2.0
    cx, cy = x + radius - 0.5, y + radius - 0.5
    for row in range(size):
        line = bytearray(bytes(background) * size)
        if y <= row < y + side:
            for col in range(max(x, 0), min(x + side, size)):
                if shape == "disc" and (col - cx) ** 2 + (row - cy) ** 2 > radius * radius:
                    continue
                line[3 * col:3 * col + 3] = bytes(colour)
        rows.append(line)
    return rows


def make_video(rng, label, num_frames, size, side, shape, colours, jitter):
    """Start position and colours for one video; the shape stays fully inside the frame for every frame."""
    dx, dy = DIRECTIONS[label]
    speed = max(1, (size - side) // max(1, num_frames - 1))
    travel = speed * (num_frames - 1)
    if travel > size - side:
        raise SystemExit(f"error: a {side}px shape moving {speed}px/frame for {num_frames} frames leaves a "
                         f"{size}px frame; use a larger --size or smaller --shape-size")

    def start(d):
        if jitter >= 0:  # the path centred in the frame, moved by up to `jitter` pixels along each axis
            centred = (size - side - (travel if d else 0)) // 2 + (travel if d < 0 else 0)
            low, high = (travel if d < 0 else 0), (size - side - (travel if d > 0 else 0))
            return min(high, max(low, centred + rng.randint(-jitter, jitter)))
        if d > 0:
            return rng.randint(0, size - side - travel)
        if d < 0:
            return rng.randint(travel, size - side)
        return rng.randint(0, size - side)

    if colours == "fixed":
        colour, background = [255, 255, 255], [0, 0, 0]
    elif colours == "class":
        colour, background = list(CLASS_COLOURS[label]), [0, 0, 0]
    else:
        colour = [rng.randint(160, 255) for _ in range(3)]
        background = [rng.randint(0, 40) for _ in range(3)]
    return {"label": label, "x0": start(dx), "y0": start(dy), "dx": dx * speed, "dy": dy * speed,
            "colour": colour, "background": background}


def write_frames(folder, video, num_frames, size, side, shape):
    os.makedirs(folder, exist_ok=True)
    for t in range(num_frames):
        x = video["x0"] + video["dx"] * t
        y = video["y0"] + video["dy"] * t
        rows = render_frame(size, shape, side, x, y, video["colour"], video["background"])
        write_png(os.path.join(folder, f"frame_{t:05d}.png"), size, size, rows)


def encode_mp4(frame_folder, out_path, fps):
    """Encodes a frame folder with the ffmpeg CLI (H.264, near-lossless). Returns False when ffmpeg is absent."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        return False
    subprocess.run([ffmpeg, "-v", "error", "-y", "-framerate", str(fps), "-i",
                    os.path.join(frame_folder, "frame_%05d.png"), "-c:v", "libx264", "-crf", "10",
                    "-pix_fmt", "yuv420p", out_path], check=True)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output root (UCF-101 layout)")
    parser.add_argument("--videos-per-class", type=int, default=16)
    parser.add_argument("--num-frames", type=int, default=16)
    parser.add_argument("--size", type=int, default=32, help="frame width and height in pixels")
    parser.add_argument("--shape-size", type=int, default=0, help="side of the shape in pixels (default size/4)")
    parser.add_argument("--shape", choices=["square", "disc"], default="square")
    parser.add_argument("--colours", choices=["random", "fixed", "class"], default="random",
                        help="random light shape on a random dark background, always white on black, or a colour "
                             "per class (red right, green left, blue down, yellow up) on black")
    parser.add_argument("--jitter", type=int, default=-1,
                        help="start positions within this many pixels of the centred path (default -1: anywhere)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mp4-per-class", type=int, default=0,
                        help="also encode the first K videos of each class as .mp4 with the ffmpeg CLI")
    parser.add_argument("--fps", type=int, default=8, help="frame rate of the .mp4 files")
    args = parser.parse_args(argv)
    if args.size % 2 and args.mp4_per_class:
        parser.error("--size must be even for .mp4 output (yuv420p)")
    side = args.shape_size or max(2, args.size // 4)

    rng = random.Random(args.seed)
    manifest = []
    warned = False
    for label, name in enumerate(CLASS_NAMES):
        for index in range(args.videos_per_class):
            video_id = f"v{index:04d}"
            video = make_video(rng, label, args.num_frames, args.size, side, args.shape, args.colours, args.jitter)
            folder = os.path.join(args.out, name, video_id)
            write_frames(folder, video, args.num_frames, args.size, side, args.shape)
            video.update({"class": name, "path": os.path.join(name, video_id)})
            manifest.append(video)
            if index < args.mp4_per_class:
                mp4 = os.path.join(args.out, name, video_id + ".mp4")
                if encode_mp4(folder, mp4, args.fps):
                    manifest.append(dict(video, path=os.path.join(name, video_id + ".mp4")))
                elif not warned:
                    print("warning: ffmpeg not found; no .mp4 files written", file=sys.stderr)
                    warned = True
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump({"num_frames": args.num_frames, "size": args.size, "shape": args.shape, "shape_size": side,
                   "classes": CLASS_NAMES, "videos": manifest}, f, indent=1)
    print(f"wrote {len(manifest)} videos ({args.videos_per_class} per class, {args.num_frames} frames of "
          f"{args.size}x{args.size}) to {args.out}")


if __name__ == "__main__":
    main()
