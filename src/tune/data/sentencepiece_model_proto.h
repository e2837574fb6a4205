// The two things tune reads or changes in a sentencepiece model file (a serialized ModelProto) without protobuf:
// its normalization map, and a copy with that map removed. Debian's libsentencepiece ships no generated
// sentencepiece_model.pb.h, and the fields involved are few and stable, so the protobuf wire format is walked here.
//
// Why a copy without the map: transformers 5 normalizes text with the map per grapheme cluster
// (hf/precompiled_charsmap.h), unlike sentencepiece's own normalizer. tune normalizes first, as transformers does,
// then hands the text to a sentencepiece processor that must not normalize it a second time; whitespace handling
// (dummy prefix, collapsing spaces) stays sentencepiece's, as those flags are kept.
#pragma once

#include <string>
#include <string_view>

namespace tune::data {

// NormalizerSpec.precompiled_charsmap of the model, or "" when it has none (the identity). Malformed bytes throw
// tune::InputError naming `source`.
std::string sentencepiece_normalization_map(std::string_view model_bytes, const std::string& source);

// The model with its NormalizerSpec renamed "identity" and its normalization map and rule table removed (the
// whitespace flags kept), and without its self-test samples (written for the normalizing model, they would fail).
std::string sentencepiece_model_without_normalization_map(std::string_view model_bytes, const std::string& source);

}  // namespace tune::data
