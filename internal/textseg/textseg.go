// Package textseg cuts Chinese and English text into sentences and scoring terms. The local
// corpus (agent/tools) and the offline extractive model (agent) both use it, so that a passage is
// chosen and a sentence scored by the same notion of a "term", and so that a question is split
// the same way everywhere.
//
// Chinese needs no dictionary here: a run of Han characters becomes its overlapping character
// bigrams (a lone character counts by itself), skipping bigrams that contain a function character.
// Latin text becomes lower-case words without stop words, with a crude plural fold.
package textseg

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Sentences splits s after Chinese and Western sentence ends (。！？；!?; and a '.' followed by a
// space or the end), keeping the punctuation. A '.' inside "1.2" or "example.com" ends nothing.
// Pieces are returned as they are, untrimmed, so that joining them gives s back.
func Sentences(s string) []string {
	var out []string
	start := 0
	rs := []rune(s)
	for i, r := range rs {
		end := strings.ContainsRune("。！？；!?;", r) || (r == '.' && (i+1 == len(rs) || rs[i+1] == ' '))
		if end {
			out = append(out, string(rs[start:i+1]))
			start = i + 1
		}
	}
	if start < len(rs) {
		out = append(out, string(rs[start:]))
	}
	return out
}

// HanFunctionChars are Han characters that carry little meaning in a question; bigrams containing
// them are not terms.
const HanFunctionChars = "的了吗呢吧啊么是在和与或及我你他她它们这那哪个怎什几有能要可"

// ZhQuestionWords are Han bigrams (and lone characters) that only phrase a question — "怎么办",
// "是什么", "可以吗" — and would otherwise match whichever document happens to use them. The corpus
// index drops them as stop tokens.
var ZhQuestionWords = []string{
	"怎么", "么办", "了怎", "要怎", "该怎", "怎样", "么样", "什么", "么是", "是什", "有什", "么时", "如何", "该如",
	"为什", "哪些", "哪里", "哪个", "可以", "以吗", "是否", "是不", "不是", "有没", "没有", "多少", "请问",
	"一下", "我的", "我们", "你们", "的是", "的话", "能不", "吗", "呢", "的", "了", "吧", "啊", "么",
}

// zhQuestionPhrases only phrase a question; StripQuestion cuts them out before terms are taken, so
// that they neither count as terms nor glue their neighbours into bigrams that occur nowhere
// ("订多", "久到").
var zhQuestionPhrases = strings.NewReplacer(
	"什么时候", " ", "多长时间", " ", "多久", " ", "多少", " ", "多长", " ", "怎么办", " ", "怎么", " ", "怎样", " ", "如何", " ",
	"什么", " ", "是否", " ", "能不能", " ", "可不可以", " ", "可以吗", " ", "有没有", " ", "为什么", " ", "请问", " ",
	"哪些", " ", "哪里", " ", "哪个", " ", "何时", " ", "可以", " ", "需要", " ",
)

// StripQuestion blanks the Chinese phrases that only make s a question ("多久", "怎么办").
func StripQuestion(s string) string { return zhQuestionPhrases.Replace(s) }

// latinStopwords are English words that carry no topic.
var latinStopwords = map[string]bool{
	"the": true, "an": true, "is": true, "are": true, "was": true, "were": true, "be": true,
	"to": true, "of": true, "in": true, "on": true, "for": true, "and": true, "or": true,
	"how": true, "what": true, "when": true, "where": true, "which": true, "who": true, "why": true,
	"do": true, "does": true, "did": true, "can": true, "could": true, "should": true, "my": true,
	"me": true, "we": true, "our": true, "you": true, "your": true, "it": true, "its": true,
	"this": true, "that": true, "with": true, "about": true, "from": true, "by": true, "at": true,
	"as": true, "if": true, "there": true, "get": true, "please": true, "need": true, "have": true,
	"has": true, "will": true, "would": true, "any": true, "some": true, "into": true, "after": true,
	"use": true, "i": true, "am": true, "not": true, "much": true, "many": true, "long": true,
	"them": true, "they": true, "now": true, "own": true, "up": true, "set": true, "list": true,
}

// Terms returns the scoring terms of s: character bigrams of Han text (a lone Han character counts
// by itself) and lower-case Latin words, without function words and punctuation.
func Terms(s string) map[string]bool {
	out := map[string]bool{}
	var han []rune
	var word []rune
	flushHan := func() {
		switch {
		case len(han) == 1:
			if !strings.ContainsRune(HanFunctionChars, han[0]) {
				out[string(han)] = true
			}
		case len(han) > 1:
			for i := 0; i+1 < len(han); i++ {
				if strings.ContainsRune(HanFunctionChars, han[i]) || strings.ContainsRune(HanFunctionChars, han[i+1]) {
					continue
				}
				out[string(han[i:i+2])] = true
			}
		}
		han = han[:0]
	}
	flushWord := func() {
		w := Fold(string(word))
		word = word[:0]
		if w != "" {
			out[w] = true
		}
	}
	for _, r := range s {
		switch {
		case unicode.Is(unicode.Han, r):
			flushWord()
			han = append(han, r)
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			flushHan()
			word = append(word, r)
		default:
			flushHan()
			flushWord()
		}
	}
	flushHan()
	flushWord()
	return out
}

// Fold lower-cases a Latin word and folds a plural ("passwords" → "password"); it returns "" for
// a stop word or a word shorter than two letters.
func Fold(w string) string {
	w = strings.ToLower(w)
	if utf8.RuneCountInString(w) < 2 || latinStopwords[w] {
		return ""
	}
	// A crude plural fold, so "passwords" meets "password".
	if len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") {
		w = w[:len(w)-1]
	}
	return w
}

// HasHan reports whether s contains a Han character.
func HasHan(s string) bool {
	for _, r := range s {
		// No Han character lies below U+2E80: most runes need no table lookup.
		if r >= 0x2E80 && unicode.Is(unicode.Han, r) {
			return true
		}
	}
	return false
}

// ReadsAsChinese reports text that reads as Chinese: a Chinese sentence may carry a URL or a
// product name ("连接公司网络或 VPN"), an English one a Chinese document title.
func ReadsAsChinese(s string) bool {
	han, latin := 0, 0
	for _, r := range s {
		switch {
		case r >= 0x2E80 && unicode.Is(unicode.Han, r):
			han++
		case r < 0x250 && unicode.IsLetter(r):
			latin++
		}
	}
	return han > 0 && 3*han >= latin
}
