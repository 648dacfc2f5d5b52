package agent

import (
	"fmt"
	"time"
)

// texts holds the user-visible wording of run errors and of the failure content handed to the model,
// in the agent's language.
type texts struct {
	lang        string
	internal    string
	emptyAnswer string
	cancelled   string
}

var (
	textsZH = texts{lang: "zh", internal: "内部错误，本次回答已中止", emptyAnswer: "模型没有返回任何内容", cancelled: "已取消"}
	textsEN = texts{lang: "en", internal: "internal error, the answer was aborted", emptyAnswer: "the model returned an empty answer", cancelled: "cancelled"}
)

func (a *Agent) text() texts {
	if a.cfg.Lang == "en" {
		return textsEN
	}
	return textsZH
}

// modelFailed and storeFailed are what a user reads when the model service or the store failed:
// a plain sentence. The cause (provider messages, status codes, store errors) goes to the log.
func (t texts) modelFailed() string {
	if t.lang == "en" {
		return "the model service is unavailable right now; try again in a moment"
	}
	return "模型服务暂时不可用，请稍后再试。"
}

func (t texts) storeFailed() string {
	if t.lang == "en" {
		return "the conversation could not be saved; try again in a moment"
	}
	return "保存对话失败，请稍后再试。"
}

func (t texts) toolRounds(n int) string {
	if t.lang == "en" {
		return fmt.Sprintf("stopped after %d model rounds: too many tool rounds without a final answer", n)
	}
	return fmt.Sprintf("已进行 %d 轮模型调用仍未得出答案（工具调用轮数超过上限），已停止", n)
}

func (t texts) unknownTool(name string) string {
	if t.lang == "en" {
		return fmt.Sprintf("unknown tool %q", name)
	}
	return fmt.Sprintf("没有名为 %q 的工具", name)
}

func (t texts) badArguments(name string) string {
	if t.lang == "en" {
		return fmt.Sprintf("invalid arguments for tool %q: expected a JSON object", name)
	}
	return fmt.Sprintf("工具 %q 的参数无效：需要一个 JSON 对象", name)
}

func (t texts) toolTimeout(name string, d time.Duration) string {
	if t.lang == "en" {
		return fmt.Sprintf("tool %q timed out after %s", name, d)
	}
	return fmt.Sprintf("工具 %q 超时（%s）", name, d)
}

func (t texts) toolPanicked(name string) string {
	if t.lang == "en" {
		return fmt.Sprintf("tool %q failed with an internal error", name)
	}
	return fmt.Sprintf("工具 %q 内部错误", name)
}
