package web

// settingsTexts are the language switcher's strings (index.html, the account box). The group's
// label names the setting in both languages, so that a user who cannot read the current one still
// finds where to change it.
var settingsTexts = map[string]map[string]string{
	"zh": {
		"index.language": "语言 · Language",
		"index.langAuto": "跟随浏览器",
	},
	"en": {
		"index.language": "Language · 语言",
		"index.langAuto": "Browser default",
	},
}

func init() {
	for lang, m := range settingsTexts {
		for k, v := range m {
			texts[lang][k] = v
		}
	}
}
