"""Tiny random-weight diffusers editing pipelines built offline, for the editor-RL tests and the CPU recipe.

Each builder writes a folder that the stock pipeline class loads with ``from_pretrained`` (the code path a user
with real weights runs; only the sizes are small and the weights random). Tokenizers are trained here (byte-level
BPE for Qwen, a BPE CLIP tokenizer and a unigram T5 tokenizer for FLUX.1 Kontext) so nothing is downloaded; each
build writes the same tokenizer files in every process (:func:`tiny_clip_tokenizer`, :func:`tiny_t5_tokenizer`).
Model shapes follow the dummy components of diffusers' pipeline tests (QwenImageEditPlus, Flux2-Klein, Kontext).

The VAE decoders of Flux2-Klein and Kontext have their residual branches zeroed (:func:`tiny_colour_vae`), so the
decoder is conv_in -> upsampling -> GroupNorm(1 group) -> SiLU -> conv_out: a latent's channel means reach the output's
colour (a random decoder's normalisations erase most of them), which gives a colour reward a strong signal.

:data:`TINY_EDITOR_OPTIONS` are the options a tiny pipeline needs at call time (small text-encoder layers, small
image sizes); the recipe and ``miescore edit`` take them explicitly (``editor_options``), nothing is patched
globally.
"""

from __future__ import annotations

from pathlib import Path

from .tiny_models import qwen_vl_token_ids, train_tiny_tokenizer

__all__ = ["TINY_EDITOR_BUILDERS", "TINY_EDITOR_OPTIONS", "build_tiny_editor", "build_tiny_flux2_klein",
           "build_tiny_flux_kontext", "build_tiny_qwen_image_edit_plus", "tiny_clip_tokenizer", "tiny_colour_vae",
           "tiny_t5_tokenizer"]

_CORPUS = """Make the sky red. Put the cat from image 2 on the table of image 1. Replace the cup with a rocket.
Turn the wall blue and keep the person. Apply the style of the second image. Add a hat to the dog.
Remove the car. Change the season to winter. Describe the key features of the input image (color, shape, size,
texture, objects, background), then explain how the user's text instruction should alter or modify the image.
Generate a new image that meets the user's requirements while maintaining consistency with the original input.
Picture 1: Picture 2: Picture 3: system user assistant"""

# Options the tiny pipelines need when called (see the module docstring); keys are `EDITORS` names.
TINY_EDITOR_OPTIONS = {
    "qwen-image-edit-plus": {"vae_image_size": 32 * 32, "condition_image_size": 28 * 28, "height": 32, "width": 32,
                             "call_kwargs": {"max_sequence_length": 64}},
    "flux2-klein": {"height": 32, "width": 32,
                    "call_kwargs": {"max_sequence_length": 32, "text_encoder_out_layers": [1]}},
    "flux-kontext": {"height": 32, "width": 32,
                     "call_kwargs": {"max_sequence_length": 32, "max_area": 32 * 32, "_auto_resize": False}},
}


def build_tiny_qwen_image_edit_plus(path, seed: int = 0) -> Path:
    """A tiny ``QwenImageEditPlusPipeline`` (Qwen2.5-VL text encoder that sees the sources, QwenImage transformer
    with 2 layers, a 4-channel QwenImage VAE) saved under ``path``."""
    import torch
    from diffusers import (AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageEditPlusPipeline,
                           QwenImageTransformer2DModel)
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    tokenizer = train_tiny_tokenizer(400)
    geometry = dict(patch_size=14, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**geometry), tokenizer=tokenizer,
                                 video_processor=Qwen2VLVideoProcessor(**geometry))
    config = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=16, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [1, 1, 2]},
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None),
        vision_config=dict(depth=2, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=16,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        **qwen_vl_token_ids(tokenizer))
    torch.manual_seed(seed)
    text_encoder = Qwen2_5_VLForConditionalGeneration(config)
    torch.manual_seed(seed)
    transformer = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                              attention_head_dim=16, num_attention_heads=3, joint_attention_dim=16,
                                              guidance_embeds=False, axes_dims_rope=(8, 4, 4))
    torch.manual_seed(seed)
    vae = AutoencoderKLQwenImage(base_dim=24, z_dim=4, dim_mult=[1, 2, 4], num_res_blocks=1,
                                 temperal_downsample=[False, True], latents_mean=[0.0] * 4, latents_std=[1.0] * 4)
    pipe = QwenImageEditPlusPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text_encoder,
                                     tokenizer=tokenizer, processor=processor, transformer=transformer)
    pipe.save_pretrained(path)
    return Path(path)


# Qwen3-style ChatML that accepts `enable_thinking` (Flux2KleinPipeline passes enable_thinking=False).
KLEIN_CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                       "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not "
                       "enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")


def tiny_colour_vae(vae_class, seed: int, **extra):
    """A 1-level ``vae_class`` (32-px samples, 8-channel blocks, 4 latent channels) with every residual branch of
    its decoder zeroed (resnet ``conv2``, attention ``to_out``): each block becomes the identity, so the latent
    reaches ``conv_out`` through upsampling and one GroupNorm."""
    import torch
    from diffusers.models.attention_processor import Attention
    from diffusers.models.resnet import ResnetBlock2D

    torch.manual_seed(seed)
    vae = vae_class(sample_size=32, in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                    up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 8), layers_per_block=1,
                    latent_channels=4, norm_num_groups=1, use_quant_conv=False,
                    use_post_quant_conv=False, **extra)
    with torch.no_grad():
        for module in vae.decoder.modules():
            if isinstance(module, ResnetBlock2D):
                module.conv2.weight.zero_()
                module.conv2.bias.zero_()
            elif isinstance(module, Attention):
                module.to_out[0].weight.zero_()
                module.to_out[0].bias.zero_()
    return vae


def build_tiny_flux2_klein(path, seed: int = 0) -> Path:
    """A tiny ``Flux2KleinPipeline`` (Qwen3 text encoder, Flux2 transformer with 1 + 1 blocks, a 1-level Flux2
    VAE with 4 latent channels, :func:`tiny_colour_vae`) saved under ``path``."""
    import torch
    from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline, Flux2Transformer2DModel
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = train_tiny_tokenizer(400)
    tokenizer.chat_template = KLEIN_CHAT_TEMPLATE
    torch.manual_seed(seed)
    text_encoder = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None))
    torch.manual_seed(seed)
    # patchified latents: in_channels = 4 x VAE latent channels; joint dim = 1 stacked layer x hidden 16
    transformer = Flux2Transformer2DModel(patch_size=1, in_channels=16, num_layers=1,
                                          num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
                                          joint_attention_dim=16, timestep_guidance_channels=256,
                                          axes_dims_rope=(4, 4, 4, 4), guidance_embeds=False)
    vae = tiny_colour_vae(AutoencoderKLFlux2, seed)
    pipe = Flux2KleinPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text_encoder,
                              tokenizer=tokenizer, transformer=transformer)
    pipe.save_pretrained(path)
    return Path(path)


def tiny_clip_tokenizer():
    """A byte-level BPE ``CLIPTokenizer`` trained on the corpus (CLIP's ``</w>`` word ends, lower case), the same
    in every process.

    ``tokenizers``' BPE trainer gives a word-final ``c</w>`` its id when it first meets it while iterating its word
    counts, an ``AHashMap`` seeded per process (``tokenizers/src/models/bpe/trainer.rs``, ``tokenize_words``, at
    huggingface/tokenizers@3ba8ad0; not ``PYTHONHASHSEED``), and merges of equal count are ordered by those ids. So
    every byte's ``</w>`` form is declared before training, in byte order (as CLIP's own vocabulary holds all 256):
    ids and merges no longer depend on the iteration order."""
    import json

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import CLIPTokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    specials = ["<|startoftext|>", "<|endoftext|>"]
    bpe = Tokenizer(models.BPE(unk_token=None, end_of_word_suffix="</w>"))
    bpe.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(_CORPUS.splitlines(), trainers.BpeTrainer(
        vocab_size=len(specials) + 2 * len(alphabet) + 40, special_tokens=specials + [c + "</w>" for c in alphabet],
        end_of_word_suffix="</w>", show_progress=False, initial_alphabet=alphabet))
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return CLIPTokenizer(vocab=model["vocab"], merges=merges, model_max_length=77)


# UnigramTrainer.finalize scores each required character the trained model lost as its lowest score + k x this
# (tokenizers/src/models/unigram/trainer.rs, `min_score_penalty_delta`, huggingface/tokenizers@3ba8ad0)
_UNIGRAM_FALLBACK_STEP = 1e-4


def tiny_t5_tokenizer():
    """A unigram ``T5Tokenizer`` trained on the corpus (pad 0, eos 1, unk 2, as T5), the same in every process.

    ``tokenizers``' Unigram trainer takes its sentences from an ``AHashMap`` seeded per process, not by
    ``PYTHONHASHSEED`` (``tokenizers/src/models/unigram/trainer.rs``, ``train`` and ``finalize``, at
    huggingface/tokenizers@3ba8ad0): its EM sums run in another order, so the scores differ in their last bits, and
    the characters it lost are scored ``lowest + k x 1e-4`` in the order of an ``AHashSet``. So the scores are
    rounded to 1e-9, those characters take the same scores in character order, and the pieces are ordered by
    (score, piece) after the three specials."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import T5Tokenizer

    specials = ["<pad>", "</s>", "<unk>"]
    unigram = Tokenizer(models.Unigram())
    unigram.pre_tokenizer = pre_tokenizers.Metaspace()
    unigram.train_from_iterator(_CORPUS.splitlines(), trainers.UnigramTrainer(
        vocab_size=200, special_tokens=specials, unk_token="<unk>", show_progress=False))
    scores = {piece: round(score, 9) for piece, score in json.loads(unigram.to_str())["model"]["vocab"]
              if piece not in specials}
    lowest = min(scores.values())

    def on_fallback_grid(piece: str) -> bool:
        steps = (scores[piece] - lowest) / _UNIGRAM_FALLBACK_STEP
        return len(piece) == 1 and abs(steps - round(steps)) < 1e-3

    fallback = sorted(filter(on_fallback_grid, scores))
    scores.update(zip(fallback, sorted((scores[c] for c in fallback), reverse=True)))
    pieces = sorted(scores, key=lambda p: (-scores[p], p))
    return T5Tokenizer(vocab=[(p, 0.0) for p in specials] + [(p, scores[p]) for p in pieces], extra_ids=0)


def build_tiny_flux_kontext(path, seed: int = 0) -> Path:
    """A tiny ``FluxKontextPipeline`` (CLIP + T5 text encoders with offline-trained tokenizers, a FLUX transformer
    with 1 + 1 blocks and guidance embedding, a 1-level VAE with 4 latent channels) saved under ``path``."""
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxKontextPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    clip_tokenizer, t5_tokenizer = tiny_clip_tokenizer(), tiny_t5_tokenizer()
    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                         attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                         pooled_projection_dim=32, axes_dims_rope=(4, 4, 8), guidance_embeds=True)
    torch.manual_seed(seed)
    clip = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(clip_tokenizer), hidden_size=32, intermediate_size=37, num_attention_heads=4,
        num_hidden_layers=2, projection_dim=32, max_position_embeddings=77,
        bos_token_id=clip_tokenizer.bos_token_id, eos_token_id=clip_tokenizer.eos_token_id,
        pad_token_id=clip_tokenizer.pad_token_id))
    torch.manual_seed(seed)
    t5 = T5EncoderModel(T5Config(vocab_size=len(t5_tokenizer), d_model=32, d_kv=8, d_ff=37, num_layers=2,
                                 num_heads=4, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))
    vae = tiny_colour_vae(AutoencoderKL, seed, shift_factor=0.0609, scaling_factor=1.5035)
    pipe = FluxKontextPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=clip,
                               text_encoder_2=t5, tokenizer=clip_tokenizer, tokenizer_2=t5_tokenizer,
                               transformer=transformer, image_encoder=None, feature_extractor=None)
    pipe.save_pretrained(path)
    return Path(path)


TINY_EDITOR_BUILDERS = {
    "qwen-image-edit-plus": build_tiny_qwen_image_edit_plus,
    "flux2-klein": build_tiny_flux2_klein,
    "flux-kontext": build_tiny_flux_kontext,
}


def build_tiny_editor(name: str, path, seed: int = 0) -> Path:
    """The tiny pipeline of editor ``name`` (a key of :data:`TINY_EDITOR_BUILDERS`) written to ``path``."""
    if name not in TINY_EDITOR_BUILDERS:
        raise ValueError(f"no tiny builder for editor {name!r}; known: {', '.join(TINY_EDITOR_BUILDERS)}")
    return TINY_EDITOR_BUILDERS[name](path, seed=seed)
